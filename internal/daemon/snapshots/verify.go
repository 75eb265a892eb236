package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Row is a snapshot's catalog row and its function's. A restore reads
// them once, where its snapshot is chosen, and passes them down.
type Row struct {
	Sn *catalog.Snapshot
	Fn *catalog.Function
}

// Verified is a snapshot checked against its manifest, with its function.
type Verified struct {
	Sn *catalog.Snapshot
	Fn *catalog.Function
	M  *snapshot.Manifest
}

// Verify checks a snapshot before anything is restored from it: the
// manifest's checksum, every file's size and digest (the memory file is
// re-hashed only when its stamp changed since its last full check), and
// that kernel, initrd, root filesystem, function code, VMM and accelerator
// are the ones it was taken with. full forces re-hashing the memory file.
func (m *Manager) Verify(ctx context.Context, sn *catalog.Snapshot, fn *catalog.Function, full bool) (*snapshot.Manifest, error) {
	l := m.Lock(sn.ID)
	l.Lock()
	defer l.Unlock()
	if sn.RemoteMemory {
		// A completion may have finished since sn was read.
		if fresh, err := m.d.Catalog.GetSnapshot(ctx, sn.ID); err == nil && !fresh.RemoteMemory {
			*sn = *fresh
		} else {
			return m.verifyLazy(sn, fn)
		}
	}
	var trusted *snapshot.Stamp
	if !full && sn.Stamp != "" {
		var st snapshot.Stamp
		if json.Unmarshal([]byte(sn.Stamp), &st) == nil {
			trusted = &st
		}
	}
	man, stamp, err := snapshot.Check(sn.Dir, trusted)
	if err != nil {
		return nil, unusable(sn, err)
	}
	if man.ID != sn.ID || man.Function != sn.Function {
		return nil, fmt.Errorf("%w: snapshot %s: manifest belongs to %s of %s", errdefs.ErrSnapshotUnusable, sn.ID, man.ID, man.Function)
	}
	if err := m.usable(man, fn); err != nil {
		return nil, unusable(sn, err)
	}
	if trusted == nil || *trusted != stamp {
		b, _ := json.Marshal(stamp)
		sn.Stamp = string(b)
		if err := m.d.Catalog.PutSnapshot(ctx, sn); err != nil {
			return nil, err
		}
	}
	return man, nil
}

// unusable is err as the reason snapshot sn cannot be restored.
func unusable(sn *catalog.Snapshot, err error) error {
	return fmt.Errorf("%w: snapshot %s: %v", errdefs.ErrSnapshotUnusable, sn.ID, err)
}

// usable checks that a snapshot with manifest man restores here with fn,
// its dependency layer included.
func (m *Manager) usable(man *snapshot.Manifest, fn *catalog.Function) error {
	if err := m.Compatible(man, fn); err != nil {
		return err
	}
	_, err := m.d.Functions.LayerOf(fn)
	return err
}

// verifyLazy checks what of a lazy snapshot is local (manifest, device
// state, the placeholder's size, the remote manifest naming the same
// memory digest); its memory's chunks are verified as they are fetched.
func (m *Manager) verifyLazy(sn *catalog.Snapshot, fn *catalog.Function) (*snapshot.Manifest, error) {
	man, err := snapshot.CheckLazy(sn.Dir)
	if err != nil {
		return nil, unusable(sn, err)
	}
	rm, err := m.d.Registry.RemoteManifest(sn)
	if err != nil {
		return nil, err
	}
	if rf := rm.File(snapshot.MemoryFile); rf == nil || rf.SHA256 != man.Files[snapshot.MemoryFile].SHA256 || man.ID != sn.ID || man.Function != sn.Function {
		return nil, fmt.Errorf("%w: snapshot %s: its remote manifest and manifest disagree", errdefs.ErrSnapshotUnusable, sn.ID)
	}
	if err := m.usable(man, fn); err != nil {
		return nil, unusable(sn, err)
	}
	return man, nil
}

// Compatible checks that a snapshot with manifest man was taken of what
// this daemon runs fn with now (guest image, code, dependencies, VMM,
// accelerator, machine and guest shape), reporting every difference.
func (m *Manager) Compatible(man *snapshot.Manifest, fn *catalog.Function) error {
	want := m.Inputs(fn)
	var errs []error
	check := func(what string, got, exp snapshot.Digest) {
		if got != exp {
			errs = append(errs, fmt.Errorf("%w: %s digest differs from the snapshot's", snapshot.ErrIncompatible, what))
		}
	}
	check("kernel", man.Inputs.Kernel, want.Kernel)
	check("initrd", man.Inputs.Initrd, want.Initrd)
	check("root filesystem", man.Inputs.Rootfs, want.Rootfs)
	check("function code", man.Inputs.Function, want.Function)
	if err := m.d.CheckDepsInput(man, fn); err != nil {
		errs = append(errs, err)
	}
	vmm, accel := m.cfg.VMM, m.d.Accel()
	if man.VMM.Accel != accel {
		errs = append(errs, fmt.Errorf("%w: taken on %s, this daemon runs %s", snapshot.ErrIncompatible, man.VMM.Accel, accel))
	}
	if man.VMM.Name != vmm.Name || man.VMM.Version != vmm.Version {
		errs = append(errs, fmt.Errorf("%w: taken with %s %s, this daemon runs %s %s", snapshot.ErrIncompatible, man.VMM.Name, man.VMM.Version, vmm.Name, vmm.Version))
	}
	if man.Guest.Machine != vmm.ABI {
		errs = append(errs, fmt.Errorf("%w: taken on guest machine %q, this daemon builds %q: create a new snapshot",
			snapshot.ErrIncompatible, man.Guest.Machine, vmm.ABI))
	}
	if man.Guest.MemoryMiB != fn.MemoryMiB || man.Guest.VCPUs != fn.VCPUs {
		errs = append(errs, fmt.Errorf("%w: guest shape %d MiB/%d vCPU, function wants %d MiB/%d vCPU",
			snapshot.ErrIncompatible, man.Guest.MemoryMiB, man.Guest.VCPUs, fn.MemoryMiB, fn.VCPUs))
	}
	return errors.Join(errs...)
}

// Check fully verifies a snapshot (re-hashing the memory file) and
// returns it; ErrSnapshotUnusable says what is wrong.
func (m *Manager) Check(ctx context.Context, id string) (*catalog.Snapshot, error) {
	v, err := m.Verified(ctx, id, true)
	if err != nil {
		return nil, err
	}
	return v.Sn, nil
}

// Verified looks a snapshot and its function up and verifies it (full:
// re-hashing the memory file whatever its stamp says).
func (m *Manager) Verified(ctx context.Context, id string, full bool) (*Verified, error) {
	ctx, end := m.d.TraceVerify(ctx, id, full)
	row, err := m.Row(ctx, id)
	var v *Verified
	function := ""
	if err == nil {
		function = row.Fn.Name
		v, err = m.verifyRow(ctx, row, full)
	}
	end(function, err)
	return v, err
}

// Row looks a snapshot and its function up.
func (m *Manager) Row(ctx context.Context, id string) (Row, error) {
	sn, err := m.Get(ctx, id)
	if err != nil {
		return Row{}, err
	}
	return m.RowOf(ctx, sn)
}

// RowOf completes a snapshot's row with its function's.
func (m *Manager) RowOf(ctx context.Context, sn *catalog.Snapshot) (Row, error) {
	fn, err := m.d.Versions.SnapshotFunction(ctx, sn)
	if err != nil {
		return Row{}, unusable(sn, err)
	}
	return Row{sn, fn}, nil
}

// VerifiedRow verifies a snapshot whose rows were read already.
func (m *Manager) VerifiedRow(ctx context.Context, row Row, full bool) (*Verified, error) {
	ctx, end := m.d.TraceVerify(ctx, row.Sn.ID, full)
	v, err := m.verifyRow(ctx, row, full)
	end(row.Fn.Name, err)
	return v, err
}

// verifyRow is the verification's work.
func (m *Manager) verifyRow(ctx context.Context, row Row, full bool) (*Verified, error) {
	man, err := m.Verify(ctx, row.Sn, row.Fn, full)
	if err != nil {
		return nil, err
	}
	return &Verified{row.Sn, row.Fn, man}, nil
}
