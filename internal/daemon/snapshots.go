package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

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
	vmID := lv.ID
	if !lv.Shared {
		return nil, fmt.Errorf("%w: vm %s was restored with private memory; only booted VMs can be snapshotted", ErrConflict, vmID)
	}
	wasRunning := s.vms.State(lv) == catalog.StateRunning

	id := newID("snap-")
	tmp := filepath.Join(s.snapshotsDir(), ".tmp-"+id)
	final := filepath.Join(s.snapshotsDir(), id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	start := time.Now()
	m, pause, err := s.writeSnapshot(ctx, lv, id, tmp, wasRunning)
	if err == nil {
		err = s.functions.ScanForSecrets(ctx, tmp, "snapshot "+id+" of vm "+vmID)
	}
	if err == nil {
		err = snapshot.Commit(tmp, final, m)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
			return nil, fmt.Errorf("%w: snapshot %s of vm %s: %v; nothing was kept", ErrNoSpace, id, vmID, err)
		}
		return nil, fmt.Errorf("snapshot %s of vm %s: %w", id, vmID, err)
	}
	st, err := snapshot.StampOf(filepath.Join(final, snapshot.MemoryFile))
	if err != nil {
		_ = os.RemoveAll(final)
		return nil, err
	}
	stamp, _ := json.Marshal(st)
	rec = &catalog.Snapshot{ID: id, Function: lv.Fn.Name, SourceVM: vmID, Dir: final,
		MemoryMiB: m.Guest.MemoryMiB, Stamp: string(stamp), CreateMS: ms(time.Since(start)),
		PauseMS: ms(pause), CreatedAt: m.CreatedAt, Version: lv.Version}
	if lv.Version < 0 {
		// A deploy's snapshot restores with the deploy's configuration
		// until its version is published (or the deploy fails).
		s.versions.AddPending(id, lv.Fn)
	}
	for _, f := range m.Files {
		rec.SizeBytes += f.Size
		rec.DiskBytes += f.Allocated
	}
	if err := s.db.PutSnapshot(ctx, rec); err != nil {
		_ = os.RemoveAll(final)
		return nil, err
	}
	s.log.Info("snapshot created", "snapshot", id, "vm", vmID, "create_ms", rec.CreateMS,
		"pause_ms", rec.PauseMS, "disk_bytes", rec.DiskBytes)
	return rec, nil
}

// writeSnapshot fills tmp with device state and memory; the VM is paused
// while the memory is copied (its RAM file must not change underneath) and
// resumed afterwards if it was running, whatever happened.
func (s *Service) writeSnapshot(ctx context.Context, lv *liveVM, id, tmp string, wasRunning bool) (*snapshot.Manifest, time.Duration, error) {
	t0 := time.Now()
	if wasRunning {
		if err := lv.M.Pause(ctx); err != nil {
			return nil, 0, fmt.Errorf("pause: %w", err)
		}
		defer func() {
			if err := lv.M.Resume(context.WithoutCancel(ctx)); err != nil {
				s.log.Error("resume after snapshot", "vm", lv.ID, "err", err)
			}
		}()
	}
	if err := lv.M.SaveState(ctx, filepath.Join(tmp, snapshot.StateFile)); err != nil {
		return nil, time.Since(t0), fmt.Errorf("save device state: %w", err)
	}
	mem, err := snapshot.CopySparse(filepath.Join(tmp, snapshot.MemoryFile), lv.MemPath)
	if err != nil {
		return nil, time.Since(t0), fmt.Errorf("save memory: %w", err)
	}
	m := &snapshot.Manifest{
		ID: id, Function: lv.Fn.Name, CreatedAt: time.Now().UTC(),
		Guest: snapshot.Guest{MemoryMiB: lv.Fn.MemoryMiB, VCPUs: lv.Fn.VCPUs, Machine: s.cfg.VMM.MachineABI(),
			Cmdline: s.baseSpec(lv.ID, lv.Fn).Cmdline},
		VMM:    snapshot.VMM{Name: s.cfg.VMM.Name(), Version: s.vmmVersion, Accel: s.accel.Accel},
		Inputs: s.inputs(lv.Fn),
		Files:  map[string]snapshot.FileInfo{snapshot.MemoryFile: mem},
	}
	return m, time.Since(t0), nil
}

// inputs are the digests a snapshot of fn depends on, as they are now.
func (s *Service) inputs(fn *catalog.Function) snapshot.Inputs {
	return snapshot.Inputs{
		Kernel:   snapshot.Digest{SHA256: s.image.Files[s.image.KernelFile()].SHA256},
		Initrd:   snapshot.Digest{SHA256: s.image.Files[guestimage.Initrd].SHA256},
		Rootfs:   snapshot.Digest{SHA256: s.image.Files[guestimage.Rootfs].SHA256},
		Function: snapshot.Digest{SHA256: fn.Digest},
		Deps:     functions.DepsInput(fn),
	}
}

// GetSnapshot returns a snapshot.
func (s *Service) GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	if err := validID("snapshot", id); err != nil {
		return nil, err
	}
	return s.db.GetSnapshot(ctx, id)
}

// ListSnapshots returns snapshots, of one function if function is set.
func (s *Service) ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error) {
	if function != "" {
		if err := ValidName(function); err != nil {
			return nil, err
		}
	}
	return s.db.ListSnapshots(ctx, function)
}

// DeleteSnapshot removes a snapshot no live VM was restored from.
func (s *Service) DeleteSnapshot(ctx context.Context, id string) error {
	sn, err := s.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	s.pool.EvictWhere(func(k *kept) bool { return k.Snapshot == id }, "snapshot deleted")
	s.holdPool(id, true) // no new standby VMs while it goes
	s.dropSnapshotStandby(id, nil, whyStandbyGone)
	if v, err := s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Snapshot == id }); err != nil || v != nil {
		s.holdPool(id, false)
		if err == nil {
			err = fmt.Errorf("%w: snapshot %s is in use by vm %s (%s)", ErrConflict, id, v.ID, v.State)
		}
		return err
	}
	err = s.db.DeleteSnapshot(ctx, id)
	s.holdPool(id, false) // from now on a fill finds no snapshot
	if err != nil {
		return err
	}
	if s.store != nil {
		if err := s.store.Remove(id); err != nil {
			s.log.Error("remove snapshot from the memory store", "snapshot", id, "err", err)
		}
	}
	defer s.functions.KickDepsGC()
	return os.RemoveAll(sn.Dir)
}

func (s *Service) snapLock(id string) *sync.Mutex { return keyedLock(s, s.snapLocks, id) }

// keyedLock is m's lock for key, made on first use (under s.mu).
func keyedLock[L any](s *Service, m map[string]*L, key string) *L {
	s.mu.Lock()
	defer s.mu.Unlock()
	l, ok := m[key]
	if !ok {
		l = new(L)
		m[key] = l
	}
	return l
}

// VerifySnapshot checks a snapshot before anything is restored from it: the
// manifest's checksum, every file's size and digest (the memory file is
// re-hashed only when its stamp changed since its last full check), and that
// kernel, initrd, root filesystem, function code, QEMU and accelerator are
// the ones it was taken with. full forces re-hashing the memory file.
func (s *Service) VerifySnapshot(ctx context.Context, sn *catalog.Snapshot, fn *catalog.Function, full bool) (*snapshot.Manifest, error) {
	l := s.snapLock(sn.ID)
	l.Lock()
	defer l.Unlock()
	if sn.RemoteMemory {
		// A completion may have finished since sn was read.
		if fresh, err := s.db.GetSnapshot(ctx, sn.ID); err == nil && !fresh.RemoteMemory {
			*sn = *fresh
		} else {
			return s.verifyLazy(sn, fn)
		}
	}
	var trusted *snapshot.Stamp
	if !full && sn.Stamp != "" {
		var st snapshot.Stamp
		if json.Unmarshal([]byte(sn.Stamp), &st) == nil {
			trusted = &st
		}
	}
	m, stamp, err := snapshot.Check(sn.Dir, trusted)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	if m.ID != sn.ID || m.Function != sn.Function {
		return nil, fmt.Errorf("%w: snapshot %s: manifest belongs to %s of %s", ErrSnapshotUnusable, sn.ID, m.ID, m.Function)
	}
	if err := s.compatible(m, fn); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	if _, err := s.functions.LayerOf(fn); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	if trusted == nil || *trusted != stamp {
		b, _ := json.Marshal(stamp)
		sn.Stamp = string(b)
		if err := s.db.PutSnapshot(ctx, sn); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// verifyLazy checks what of a lazy snapshot is local (manifest, device
// state, the placeholder's size, the remote manifest naming the same
// memory digest); its memory's chunks are verified as they are fetched.
func (s *Service) verifyLazy(sn *catalog.Snapshot, fn *catalog.Function) (*snapshot.Manifest, error) {
	m, err := snapshot.CheckLazy(sn.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	rm, err := regsync.RemoteManifest(sn)
	if err != nil {
		return nil, err
	}
	if rf := rm.File(snapshot.MemoryFile); rf == nil || rf.SHA256 != m.Files[snapshot.MemoryFile].SHA256 || m.ID != sn.ID || m.Function != sn.Function {
		return nil, fmt.Errorf("%w: snapshot %s: its remote manifest and manifest disagree", ErrSnapshotUnusable, sn.ID)
	}
	if err := s.compatible(m, fn); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	if _, err := s.functions.LayerOf(fn); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	return m, nil
}

func (s *Service) compatible(m *snapshot.Manifest, fn *catalog.Function) error {
	want := s.inputs(fn)
	var errs []error
	check := func(what string, got, exp snapshot.Digest) {
		if got != exp {
			errs = append(errs, fmt.Errorf("%w: %s digest differs from the snapshot's", snapshot.ErrIncompatible, what))
		}
	}
	check("kernel", m.Inputs.Kernel, want.Kernel)
	check("initrd", m.Inputs.Initrd, want.Initrd)
	check("root filesystem", m.Inputs.Rootfs, want.Rootfs)
	check("function code", m.Inputs.Function, want.Function)
	if err := functions.CheckDepsInput(m, fn); err != nil {
		errs = append(errs, err)
	}
	if m.VMM.Accel != s.accel.Accel {
		errs = append(errs, fmt.Errorf("%w: taken on %s, this daemon runs %s", snapshot.ErrIncompatible, m.VMM.Accel, s.accel.Accel))
	}
	if m.VMM.Name != s.cfg.VMM.Name() || m.VMM.Version != s.vmmVersion {
		errs = append(errs, fmt.Errorf("%w: taken with %s %s, this daemon runs %s %s", snapshot.ErrIncompatible, m.VMM.Name, m.VMM.Version, s.cfg.VMM.Name(), s.vmmVersion))
	}
	if abi := s.cfg.VMM.MachineABI(); m.Guest.Machine != abi {
		errs = append(errs, fmt.Errorf("%w: taken on guest machine %q, this daemon builds %q: create a new snapshot",
			snapshot.ErrIncompatible, m.Guest.Machine, abi))
	}
	if m.Guest.MemoryMiB != fn.MemoryMiB || m.Guest.VCPUs != fn.VCPUs {
		errs = append(errs, fmt.Errorf("%w: guest shape %d MiB/%d vCPU, function wants %d MiB/%d vCPU",
			snapshot.ErrIncompatible, m.Guest.MemoryMiB, m.Guest.VCPUs, fn.MemoryMiB, fn.VCPUs))
	}
	return errors.Join(errs...)
}

// CheckSnapshot fully verifies a snapshot (re-hashing the memory file) and
// returns it; ErrSnapshotUnusable says what is wrong.
func (s *Service) CheckSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	v, err := s.verified(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return v.sn, nil
}

// verifiedSnapshot is a snapshot checked against its manifest, with its
// function.
type verifiedSnapshot struct {
	sn *catalog.Snapshot
	fn *catalog.Function
	m  *snapshot.Manifest
}

// verified looks a snapshot and its function up and verifies it (full:
// re-hashing the memory file whatever its stamp says).
func (s *Service) verified(ctx context.Context, id string, full bool) (*verifiedSnapshot, error) {
	ctx, sp := s.span(ctx, SpanVerify, AttrSnapshot.String(id), AttrVerifyFull.Bool(full))
	row, err := s.snapshotRow(ctx, id)
	var v *verifiedSnapshot
	if err == nil {
		sp.SetAttributes(AttrFunction.String(row.fn.Name))
		v, err = s.verifyRow(ctx, row, full)
	}
	endSpan(sp, err)
	return v, err
}

// snapshotRow is a snapshot's catalog row and its function's. A restore
// reads them once, where its snapshot is chosen, and passes them down.
type snapshotRow struct {
	sn *catalog.Snapshot
	fn *catalog.Function
}

// snapshotRow looks a snapshot and its function up.
func (s *Service) snapshotRow(ctx context.Context, id string) (snapshotRow, error) {
	sn, err := s.GetSnapshot(ctx, id)
	if err != nil {
		return snapshotRow{}, err
	}
	return s.rowOf(ctx, sn)
}

// rowOf completes a snapshot's row with its function's.
func (s *Service) rowOf(ctx context.Context, sn *catalog.Snapshot) (snapshotRow, error) {
	fn, err := s.versions.SnapshotFunction(ctx, sn)
	if err != nil {
		return snapshotRow{}, fmt.Errorf("%w: snapshot %s: %v", ErrSnapshotUnusable, sn.ID, err)
	}
	return snapshotRow{sn, fn}, nil
}

// verifiedRow verifies a snapshot whose rows were read already.
func (s *Service) verifiedRow(ctx context.Context, row snapshotRow, full bool) (*verifiedSnapshot, error) {
	ctx, sp := s.span(ctx, SpanVerify, AttrSnapshot.String(row.sn.ID), AttrVerifyFull.Bool(full), AttrFunction.String(row.fn.Name))
	v, err := s.verifyRow(ctx, row, full)
	endSpan(sp, err)
	return v, err
}

// verifyRow is the verification's work.
func (s *Service) verifyRow(ctx context.Context, row snapshotRow, full bool) (*verifiedSnapshot, error) {
	m, err := s.VerifySnapshot(ctx, row.sn, row.fn, full)
	if err != nil {
		return nil, err
	}
	return &verifiedSnapshot{row.sn, row.fn, m}, nil
}

// PinSnapshot pins a snapshot (garbage collection keeps it) or unpins it.
func (s *Service) PinSnapshot(ctx context.Context, id string, pinned bool) (*catalog.Snapshot, error) {
	if err := validID("snapshot", id); err != nil {
		return nil, err
	}
	if err := s.db.SetSnapshotPinned(ctx, id, pinned); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, fmt.Errorf("%w: snapshot %s", ErrNotFound, id)
		}
		return nil, err
	}
	return s.GetSnapshot(ctx, id)
}

// collectSnapshots keeps the newest SnapshotKeep snapshots of each of the
// function's versions (and of its unversioned ones) and deletes the older
// ones that are not pinned, not in use (a live VM restored from it, or
// kept idle) and not in spare (a snapshot just pulled, however old);
// nothing with SnapshotKeep 0. Whole versions go by version retention
// (versions.Manager.CollectVersions), never here.
func (s *Service) collectSnapshots(ctx context.Context, function string, spare ...string) {
	if s.cfg.SnapshotKeep <= 0 {
		return
	}
	snaps, err := s.db.ListSnapshots(ctx, function) // oldest first
	if err != nil || len(snaps) <= s.cfg.SnapshotKeep {
		return
	}
	byVersion := map[int][]*catalog.Snapshot{}
	for _, sn := range snaps {
		if sn.Version >= 0 { // a deploy's pending snapshots are its own
			byVersion[sn.Version] = append(byVersion[sn.Version], sn)
		}
	}
	for _, group := range byVersion {
		if len(group) <= s.cfg.SnapshotKeep {
			continue
		}
		for _, sn := range group[:len(group)-s.cfg.SnapshotKeep] {
			if sn.Pinned || slices.Contains(spare, sn.ID) {
				continue
			}
			if v, err := s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Snapshot == sn.ID }); err != nil || v != nil {
				continue
			}
			if err := s.DeleteSnapshot(ctx, sn.ID); err != nil {
				s.log.Warn("snapshot garbage collection", "snapshot", sn.ID, "err", err)
				continue
			}
			s.log.Info("snapshot collected", "snapshot", sn.ID, "function", function, "version", sn.Version, "keep", s.cfg.SnapshotKeep)
		}
	}
}
