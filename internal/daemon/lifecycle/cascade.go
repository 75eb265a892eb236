package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// deletedVMs adds each VM to a deletion's list once.
type deletedVMs struct {
	out  *wire.FunctionDeletion
	seen map[string]bool
}

func (d *deletedVMs) note(v wire.DeletedVM) {
	if !d.seen[v.ID] {
		d.seen[v.ID] = true
		d.out.VMs = append(d.out.VMs, v)
	}
}

// stopVMs stops and forgets every VM of function (standby and kept ones,
// and those still starting), killing what is in use, and returns the
// function's gate held: no cold start of it is under way. What went is
// added to out.
func (m *Manager) stopVMs(ctx context.Context, name string, out *wire.FunctionDeletion) (*sync.RWMutex, error) {
	vms, err := m.functionVMs(ctx, name)
	if err != nil {
		return nil, err
	}
	gone := &deletedVMs{out: out, seen: map[string]bool{}}
	idle := m.d.Kept(name)
	for _, v := range vms {
		if v.Live() {
			gone.note(wire.DeletedVM{ID: v.ID, State: v.State, Kept: idle[v.ID], Invocation: m.d.Running(v.ID)})
		}
	}
	m.d.DropPooled(name)
	g, err := m.stopLive(ctx, name, gone)
	if err != nil {
		return nil, err
	}
	// What is left are records of VMs that ended (failed, stopped).
	if vms, err = m.functionVMs(ctx, name); err != nil {
		g.Unlock()
		return nil, err
	}
	for _, v := range vms {
		gone.note(wire.DeletedVM{ID: v.ID, State: v.State})
		_ = os.RemoveAll(v.RunDir)
		if err := m.d.Catalog.DeleteVM(ctx, v.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			g.Unlock()
			return nil, err
		}
	}
	return g, nil
}

// stopLive ends the function's VMs with a VMM until none is left and none
// is starting, and returns the function's gate held; it gives up after
// the boot timeout.
func (m *Manager) stopLive(ctx context.Context, name string, gone *deletedVMs) (*sync.RWMutex, error) {
	g := m.d.Gate(name)
	for deadline := time.Now().Add(m.cfg.BootTimeout); ; time.Sleep(20 * time.Millisecond) {
		for _, lv := range m.d.Live(name) {
			d := wire.DeletedVM{ID: lv.ID, State: catalog.StateBooting, Invocation: lv.Invocation}
			if v, err := m.d.Catalog.GetVM(ctx, lv.ID); err == nil {
				d.State = v.State
			}
			gone.note(d)
			if err := m.d.EndVM(ctx, lv.ID, lv.RunDir); err != nil {
				return nil, err
			}
		}
		starting, err := m.startingVMs(ctx, name)
		if err != nil {
			return nil, err
		}
		if len(starting) == 0 && g.TryLock() {
			if len(m.d.Live(name)) == 0 {
				return g, nil
			}
			g.Unlock()
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: function %q: VMs still starting after %s (%s); nothing else was deleted, try again",
				errdefs.ErrConflict, name, m.cfg.BootTimeout, listSome(starting))
		}
	}
}

// startingVMs are function's VMs the catalog records live without a VMM
// here yet (a start between its record and its process).
func (m *Manager) startingVMs(ctx context.Context, name string) ([]string, error) {
	vms, err := m.functionVMs(ctx, name)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, v := range vms {
		if v.Live() && !m.d.IsLive(v.ID) {
			ids = append(ids, v.ID)
		}
	}
	return ids, nil
}

// deleteSnapshots deletes every snapshot of function, pinned ones too,
// with their memory store copies.
func (m *Manager) deleteSnapshots(ctx context.Context, name string, out *wire.FunctionDeletion) error {
	snaps, err := m.d.Catalog.ListSnapshots(ctx, name)
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		d := wire.DeletedSnapshot{ID: sn.ID, Version: max(sn.Version, 0), Pinned: sn.Pinned, Stored: m.d.Stored(sn.ID)}
		if err := m.d.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("function %q: snapshot %s: %w", name, sn.ID, err)
		}
		out.Snapshots = append(out.Snapshots, d)
	}
	return nil
}

// Forget removes a function's record, versions, aliases and code whatever
// uses it (a pull undoing the function it created, a refresh replacing an
// outdated copy: they cleared the rest).
func (m *Manager) Forget(ctx context.Context, name string) error {
	return m.drop(ctx, name, &wire.FunctionDeletion{})
}

// drop removes the function's versions and aliases, its record and its
// code (the function's and its versions' code directories).
func (m *Manager) drop(ctx context.Context, name string, out *wire.FunctionDeletion) error {
	c := m.d.Catalog
	f, err := c.GetFunction(ctx, name)
	if err != nil {
		return err
	}
	vs, err := c.ListVersions(ctx, name)
	if err != nil {
		return err
	}
	aliases, err := c.ListAliases(ctx, name)
	if err != nil {
		return err
	}
	dirs := []string{filepath.Dir(f.CodeDir)}
	for _, v := range vs {
		out.Versions = append(out.Versions, v.Number)
		if d := filepath.Dir(v.Config.CodeDir); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, a := range aliases {
		out.Aliases = append(out.Aliases, a.Name)
	}
	if err := c.DeleteFunctionVersions(ctx, name); err != nil {
		return err
	}
	if err := c.DeleteFunction(ctx, name); err != nil {
		return err
	}
	m.d.KickDepsGC() // its layers may be unused now
	for _, v := range vs {
		m.d.ClearStale(name, v.Number)
	}
	var errs []error
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			errs = append(errs, fmt.Errorf("function %q: remove its code: %w", name, err))
			continue
		}
		out.CodeDirs++
	}
	return errors.Join(errs...)
}
