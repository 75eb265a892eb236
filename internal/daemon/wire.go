package daemon

import (
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/wire"
)

// The catalog's rows as the API's bodies: the catalog keeps what the daemon
// needs (stamps, raw JSON), the API says what a user sees.

// FunctionBody is a function as the API answers it.
func FunctionBody(f *catalog.Function) *wire.Function {
	return &wire.Function{Name: f.Name, Digest: f.Digest, CodeDir: f.CodeDir, Disk: f.Disk, MemoryMiB: f.MemoryMiB,
		VCPUs: f.VCPUs, Network: wire.Network{Egress: f.Network.Egress, Services: f.Network.Services},
		MaxConcurrency: f.MaxConcurrency, KeepAliveS: f.KeepAliveS,
		VMMPool: f.VMMPool, VMMPoolTTLS: f.VMMPoolTTLS, CreatedAt: f.CreatedAt, Env: f.Env, Secrets: f.Secrets, Deps: depsBody(f.Deps)}
}

// SecretBody is a secret as the API answers it.
func SecretBody(i SecretInfo) wire.Secret {
	return wire.Secret{Name: i.Name, Version: i.Version, Digest: i.Digest, CreatedAt: i.CreatedAt, UpdatedAt: i.UpdatedAt}
}

func depsBody(d *catalog.Deps) *wire.FunctionDeps {
	if d == nil {
		return nil
	}
	return &wire.FunctionDeps{Requested: d.Requested, Resolved: d.Resolved, Layer: d.Layer,
		LayerSHA256: d.LayerSHA256, LayerBytes: d.LayerBytes, Format: d.Format}
}

// VersionBody is a function version as the API answers it.
func VersionBody(v *VersionInfo) *wire.Version {
	return &wire.Version{Function: v.Function, Version: v.Number, Digest: v.Digest, Config: *FunctionBody(&v.Config),
		Snapshot: v.Snapshot, Aliases: v.Aliases, Collected: v.Collected, Build: v.Inputs, CreatedAt: v.CreatedAt}
}

// AliasBody is an alias as the API answers it.
func AliasBody(a *catalog.Alias) *wire.Alias {
	out := &wire.Alias{Function: a.Function, Name: a.Name, History: a.History, UpdatedAt: a.UpdatedAt}
	_ = json.Unmarshal(a.Routing, &out.Routing) // the daemon wrote it
	return out
}

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

// Bodies maps rows to bodies.
func Bodies[R, B any](rows []R, body func(R) B) []B {
	out := make([]B, len(rows))
	for i, r := range rows {
		out[i] = body(r)
	}
	return out
}

func guestImage(im *guestimage.Image) wire.GuestImage {
	out := wire.GuestImage{Dir: im.Dir, Format: im.Format, Hash: im.Hash, KernelVersion: im.KernelVersion,
		Cmdline: im.Cmdline, BuiltAt: im.BuiltAt, Files: map[string]wire.GuestImageFile{}}
	for name, f := range im.Files {
		out.Files[name] = wire.GuestImageFile{Size: f.Size, SHA256: f.SHA256}
	}
	return out
}
