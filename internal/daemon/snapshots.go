package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Snapshots are the snapshots component (package daemon/snapshots); this
// file is its wiring: what it needs of the daemon, the VM side of taking a
// snapshot, and the service's snapshot API forwarded to it.

// newSnapshots makes the snapshots component (in open, once the catalog,
// functions, versions and registry are).
func (s *Service) newSnapshots() *snapshots.Manager {
	c := s.cfg
	return snapshots.New(snapshots.Config{Dir: s.snapshotsDir(), Keep: c.SnapshotKeep, Image: s.image,
		VMM:      snapshots.Machine{Name: c.VMM.Name(), Version: s.vmmVersion, ABI: c.VMM.MachineABI()},
		StoreDir: c.StoreDir, StoreDeviceFile: c.StoreDeviceFile},
		snapshots.Deps{Log: s.log, Catalog: s.db, Functions: s.functions, Versions: s.versions,
			Registry: snapRegistry{s}, VMs: snapVMs{s}, Accel: func() string { return s.accel.Accel },
			CheckName: ValidName, DepsInput: functions.DepsInput, CheckDepsInput: functions.CheckDepsInput,
			TraceVerify: func(ctx context.Context, id string, full bool) (context.Context, func(string, error)) {
				ctx, sp := s.span(ctx, SpanVerify, AttrSnapshot.String(id), AttrVerifyFull.Bool(full))
				return ctx, func(function string, err error) {
					if function != "" {
						sp.SetAttributes(AttrFunction.String(function))
					}
					endSpan(sp, err)
				}
			}})
}

// snapRegistry is the snapshot registry as the snapshots component sees it.
type snapRegistry struct{ s *Service }

func (x snapRegistry) RemoteManifest(sn *catalog.Snapshot) (*registry.RemoteManifest, error) {
	return regsync.RemoteManifest(sn)
}

func (x snapRegistry) NeedLocalMemory(sn *catalog.Snapshot, what string) error {
	return regsync.NeedLocalMemory(sn, what)
}

func (x snapRegistry) Complete(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return x.s.reg.CompleteSnapshot(ctx, id)
}

// snapVMs is the daemon's VMs as the snapshots component sees them.
type snapVMs struct{ s *Service }

func (x snapVMs) Release(id string) func() {
	x.s.pool.EvictWhere(func(k *kept) bool { return k.Snapshot == id }, "snapshot deleted")
	x.s.holdPool(id, true)
	x.s.dropSnapshotStandby(id, nil, whyStandbyGone)
	return func() { x.s.holdPool(id, false) }
}

func (x snapVMs) Using(ctx context.Context, id string) (*catalog.VM, error) {
	return x.s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Snapshot == id })
}

func (x snapVMs) DropStoreStandbys(id string) {
	x.s.dropSnapshotStandby(id, usesStore, whyStandbyStore)
}

// CreateSnapshot pauses a booted VM, writes its device state and a sparse
// copy of its memory into a new snapshot, and resumes it if it was running.
// Nothing is visible until the snapshot is complete and durable; on any
// failure (a full disk, a QEMU error) every partial file is removed.
func (s *Service) CreateSnapshot(ctx context.Context, vmID string) (*catalog.Snapshot, error) {
	lv, err := s.lockLive(ctx, vmID, catalog.StateRunning, catalog.StatePaused)
	if err != nil {
		return nil, err
	}
	sn, err := s.snapshotLocked(ctx, lv)
	lv.Mu.Unlock()
	if err == nil {
		s.collectSnapshots(ctx, sn.Function)
	}
	return sn, err
}

// snapshotLocked snapshots a VM whose lock the caller holds.
func (s *Service) snapshotLocked(ctx context.Context, lv *liveVM) (rec *catalog.Snapshot, err error) {
	ctx, sp := s.span(ctx, SpanSnapshot, AttrVM.String(lv.ID), AttrFunction.String(lv.Fn.Name))
	defer func() {
		if rec != nil {
			sp.SetAttributes(AttrSnapshot.String(rec.ID))
		}
		endSpan(sp, err)
	}()
	wasRunning := s.vms.State(lv) == catalog.StateRunning
	return s.snaps.Take(ctx, snapshots.Source{VM: lv.ID, Fn: lv.Fn, Version: lv.Version, Shared: lv.Shared,
		Cmdline: s.baseSpec(lv.ID, lv.Fn).Cmdline,
		Write: func(ctx context.Context, dir string) (snapshot.FileInfo, time.Duration, error) {
			return s.writeSnapshot(ctx, lv, dir, wasRunning)
		}})
}

// writeSnapshot fills dir with device state and memory; the VM is paused
// while the memory is copied (its RAM file must not change underneath) and
// resumed afterwards if it was running, whatever happened.
func (s *Service) writeSnapshot(ctx context.Context, lv *liveVM, dir string, wasRunning bool) (snapshot.FileInfo, time.Duration, error) {
	t0 := time.Now()
	if wasRunning {
		if err := lv.M.Pause(ctx); err != nil {
			return snapshot.FileInfo{}, 0, fmt.Errorf("pause: %w", err)
		}
		defer func() {
			if err := lv.M.Resume(context.WithoutCancel(ctx)); err != nil {
				s.log.Error("resume after snapshot", "vm", lv.ID, "err", err)
			}
		}()
	}
	if err := lv.M.SaveState(ctx, filepath.Join(dir, snapshot.StateFile)); err != nil {
		return snapshot.FileInfo{}, time.Since(t0), fmt.Errorf("save device state: %w", err)
	}
	mem, err := snapshot.CopySparse(filepath.Join(dir, snapshot.MemoryFile), lv.MemPath)
	if err != nil {
		return snapshot.FileInfo{}, time.Since(t0), fmt.Errorf("save memory: %w", err)
	}
	return mem, time.Since(t0), nil
}

// The snapshot API on the service (the snapshots component's; forwarded
// rather than embedded, so a method value taken of a nil *Service, as the
// API's route table does, stays valid).

// GetSnapshot returns a snapshot.
func (s *Service) GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return s.snaps.Get(ctx, id)
}

// ListSnapshots returns snapshots, of one function if function is set.
func (s *Service) ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error) {
	return s.snaps.List(ctx, function)
}

// DeleteSnapshot removes a snapshot no live VM was restored from.
func (s *Service) DeleteSnapshot(ctx context.Context, id string) error {
	return s.snaps.Delete(ctx, id)
}

// PinSnapshot pins a snapshot (garbage collection keeps it) or unpins it.
func (s *Service) PinSnapshot(ctx context.Context, id string, pinned bool) (*catalog.Snapshot, error) {
	return s.snaps.Pin(ctx, id, pinned)
}

// VerifySnapshot checks a snapshot before anything is restored from it
// (snapshots.Manager.Verify); full forces re-hashing the memory file.
func (s *Service) VerifySnapshot(ctx context.Context, sn *catalog.Snapshot, fn *catalog.Function, full bool) (*snapshot.Manifest, error) {
	return s.snaps.Verify(ctx, sn, fn, full)
}

// CheckSnapshot fully verifies a snapshot (re-hashing the memory file) and
// returns it; ErrSnapshotUnusable says what is wrong.
func (s *Service) CheckSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return s.snaps.Check(ctx, id)
}

// CopySnapshot duplicates a snapshot under a new id, sharing no file with
// the original (snapshots.Manager.Copy).
func (s *Service) CopySnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return s.snaps.Copy(ctx, id)
}

// snapshotRow is a snapshot's catalog row and its function's.
type snapshotRow = snapshots.Row

// verifiedSnapshot is a snapshot checked against its manifest, with its
// function.
type verifiedSnapshot = snapshots.Verified

// snapshotRow looks a snapshot and its function up.
func (s *Service) snapshotRow(ctx context.Context, id string) (snapshotRow, error) {
	return s.snaps.Row(ctx, id)
}

// rowOf completes a snapshot's row with its function's.
func (s *Service) rowOf(ctx context.Context, sn *catalog.Snapshot) (snapshotRow, error) {
	return s.snaps.RowOf(ctx, sn)
}

// verified looks a snapshot and its function up and verifies it.
func (s *Service) verified(ctx context.Context, id string, full bool) (*verifiedSnapshot, error) {
	return s.snaps.Verified(ctx, id, full)
}

// verifiedRow verifies a snapshot whose rows were read already.
func (s *Service) verifiedRow(ctx context.Context, row snapshotRow, full bool) (*verifiedSnapshot, error) {
	return s.snaps.VerifiedRow(ctx, row, full)
}

// collectSnapshots applies a function's snapshot retention, sparing those
// named (snapshots.Manager.Collect).
func (s *Service) collectSnapshots(ctx context.Context, function string, spare ...string) {
	s.snaps.Collect(ctx, function, spare...)
}
