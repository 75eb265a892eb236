package daemon

import (
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// The catalog's VMs, snapshots and invocations as the API's bodies
// (operations answer with them too, tests read them); the API converts the
// other rows itself.

// VMBody is a VM as the API answers it; restore is the breakdown of the
// restore that started it, if it was just restored.
func VMBody(v *catalog.VM, restore *RestoreTiming) *wire.VM {
	b := &wire.VM{ID: v.ID, Function: v.Function, State: v.State, Reason: v.Reason, PID: v.PID, RunDir: v.RunDir,
		Snapshot: v.Snapshot, Strategy: v.Strategy, Accel: v.Accel, MemoryMiB: v.MemoryMiB, BootMS: v.BootMS,
		CreatedAt: v.CreatedAt, UpdatedAt: v.UpdatedAt, Restore: restore, Version: max(v.Version, 0), ReadyMemoryMiB: v.ReadyMiB}
	if !v.IdleUntil.IsZero() {
		until := v.IdleUntil
		b.Idle, b.IdleUntil = true, &until
	}
	return b
}

// SnapshotBody is a snapshot as the API answers it, with its prepare result.
func SnapshotBody(sn *catalog.Snapshot) *wire.Snapshot {
	out := &wire.Snapshot{ID: sn.ID, Function: sn.Function, SourceVM: sn.SourceVM, Dir: sn.Dir, MemoryMiB: sn.MemoryMiB,
		SizeBytes: sn.SizeBytes, DiskBytes: sn.DiskBytes, CreateMS: sn.CreateMS, PauseMS: sn.PauseMS,
		CreatedAt: sn.CreatedAt, Parent: sn.Parent, Pinned: sn.Pinned, Memory: wire.MemoryLocal, Version: max(sn.Version, 0)}
	if sn.RemoteMemory {
		out.Memory = wire.MemoryRemote
	}
	if len(sn.Prepared) > 0 {
		var p wire.PrepareResult
		if json.Unmarshal(sn.Prepared, &p) == nil { // the daemon wrote it; unreadable is left out
			out.Prepared = &p
		}
	}
	return out
}

// InvocationRecordBody is a stored invocation as the API answers it.
func InvocationRecordBody(r *catalog.Invocation) *wire.InvocationRecord {
	out := &wire.InvocationRecord{ID: r.ID, Function: r.Function, VM: r.VM, Snapshot: r.Snapshot, Strategy: r.Strategy,
		OK: r.OK, CreatedAt: r.CreatedAt}
	_ = json.Unmarshal(r.Detail, &out.Detail) // the daemon wrote it
	return out
}
