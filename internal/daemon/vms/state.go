package vms

import (
	"context"
	"fmt"
	"regexp"
	"strings"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// idRE is what a VM id looks like (newID).
var idRE = regexp.MustCompile(`^vm-[0-9a-f]{12}$`)

// Get returns a VM.
func (m *Manager) Get(ctx context.Context, id string) (*catalog.VM, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("%w: vm id %q is malformed", errdefs.ErrInvalid, id)
	}
	v, err := m.d.Catalog.GetVM(ctx, id)
	if err == nil {
		m.d.MarkIdle(v)
	}
	return v, err
}

// List returns every VM.
func (m *Manager) List(ctx context.Context) ([]*catalog.VM, error) {
	vms, err := m.d.Catalog.ListVMs(ctx)
	m.d.MarkIdle(vms...)
	return vms, err
}

// Pause stops a running VM's vCPUs.
func (m *Manager) Pause(ctx context.Context, id string) (*catalog.VM, error) {
	return m.transition(ctx, id, catalog.StateRunning, catalog.StatePaused, vmm.Machine.Pause)
}

// Resume restarts a paused VM's vCPUs and sets its clock, which stood
// still while it was paused.
func (m *Manager) Resume(ctx context.Context, id string) (*catalog.VM, error) {
	return m.transition(ctx, id, catalog.StatePaused, catalog.StateRunning, func(mach vmm.Machine, ctx context.Context) error {
		if err := mach.Resume(ctx); err != nil {
			return err
		}
		lv, ok := m.Live(id)
		if !ok || lv.Agent == nil {
			return nil
		}
		_, err := lv.Agent.Clock(ctx)
		return err
	})
}

func (m *Manager) transition(ctx context.Context, id, from, to string, op func(vmm.Machine, context.Context) error) (*catalog.VM, error) {
	lv, err := m.Lock(ctx, id, from)
	if err != nil {
		return nil, err
	}
	defer lv.Mu.Unlock()
	if err := op(lv.M, ctx); err != nil {
		return nil, fmt.Errorf("%w: vm %s: %v", errdefs.ErrVMFailed, id, err)
	}
	m.SetState(ctx, lv, to, "")
	return m.d.Catalog.GetVM(ctx, id)
}

// Lock returns the live VM id locked, if it is in one of states.
func (m *Manager) Lock(ctx context.Context, id string, states ...string) (*Live, error) {
	v, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	lv, ok := m.Live(id)
	if !ok {
		return nil, fmt.Errorf("%w: vm %s is %s", errdefs.ErrConflict, id, v.State)
	}
	if lv.Deleting.Load() { // before waiting for what the delete waits for
		return nil, fmt.Errorf("%w: vm %s is being deleted", errdefs.ErrConflict, id)
	}
	lv.Mu.Lock()
	m.mu.Lock()
	state := lv.state
	_, still := m.live[id]
	m.mu.Unlock()
	if !still {
		lv.Mu.Unlock()
		if fresh, err := m.d.Catalog.GetVM(ctx, id); err == nil {
			v = fresh
		} else {
			return nil, err // deleted meanwhile
		}
		return nil, fmt.Errorf("%w: vm %s is %s", errdefs.ErrConflict, id, v.State)
	}
	if lv.Deleting.Load() {
		lv.Mu.Unlock()
		return nil, fmt.Errorf("%w: vm %s is being deleted", errdefs.ErrConflict, id)
	}
	for _, st := range states {
		if state == st {
			return lv, nil
		}
	}
	lv.Mu.Unlock()
	return nil, fmt.Errorf("%w: vm %s is %s, want %s", errdefs.ErrConflict, id, state, strings.Join(states, " or "))
}
