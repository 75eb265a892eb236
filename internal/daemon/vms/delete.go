package vms

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Deleting a VM: a delete waits for what holds the VM (an invocation, a
// snapshot, a boot) and refuses new work on it meanwhile; a forced delete
// kills the VMM at once, and an invocation running on it fails with an
// error naming the delete (the daemon records it in the history).

// Why a delete killed a VM that was in use (the invocation's error and the
// VM's reason say it).
const (
	WhyForced  = "deleted with force (thaw vm delete --force)"
	WhyCascade = "deleted with its function (thaw function delete --cascade)"
)

// Delete stops a VM once what runs on it has finished (no new invocation
// starts on it meanwhile), frees everything it held and forgets it. kill,
// if set, is why the VMM is killed at once when the VM is in use
// (WhyForced).
func (m *Manager) Delete(ctx context.Context, id, kill string) error {
	v, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx) // once begun, the delete ends even if its caller went away
	if _, ok := m.Live(id); !ok && v.Live() {
		m.awaitStart(ctx, id)
	}
	return m.End(ctx, id, v.RunDir, kill)
}

// awaitStart waits, up to the boot timeout, while VM id is recorded live
// without a VMM here yet (its start is under way): deleted before it is
// live, the start would record it again.
func (m *Manager) awaitStart(ctx context.Context, id string) {
	for deadline := time.Now().Add(m.cfg.BootTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := m.Live(id); ok {
			return
		}
		if v, err := m.d.Catalog.GetVM(ctx, id); err != nil || !v.Live() {
			return
		}
	}
}

// End stops VM id if it has a VMM (kill: at once), removes its run
// directory and forgets it.
func (m *Manager) End(ctx context.Context, id, runDir, kill string) error {
	m.d.ForgetPooled(id)
	if lv, ok := m.Live(id); ok {
		m.stopForDelete(ctx, lv, kill)
	}
	_ = os.RemoveAll(runDir)
	if err := m.d.Catalog.DeleteVM(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err // not found: whatever ended the VM meanwhile forgot it
	}
	return nil
}

// stopForDelete stops a live VM under its lock: it waits for the lock's
// holder, or with kill set kills the VMM first if the VM is in use, so
// the holder's work fails (and says why: KilledBy).
func (m *Manager) stopForDelete(ctx context.Context, lv *Live, kill string) {
	lv.Deleting.Store(true)
	reason := "deleted"
	switch {
	case kill == "":
		lv.Mu.Lock()
	case lv.Mu.TryLock():
	default:
		lv.KilledBy.Store(&kill)
		reason = kill
		if err := lv.M.Kill(); err != nil {
			m.d.Log.Warn("kill vm for a delete", "vm", lv.ID, "err", err)
		}
		lv.Mu.Lock() // the holder's work fails with its VMM gone
	}
	m.Stop(ctx, lv, catalog.StateStopped, reason)
	lv.Mu.Unlock()
}

// RunningInvocation is the invocation VM id is serving now, nil if none.
func (m *Manager) RunningInvocation(id string) *wire.RunningInvocation {
	lv, ok := m.Live(id)
	if !ok {
		return nil
	}
	r := lv.Running.Load()
	if r == nil {
		return nil
	}
	return &wire.RunningInvocation{ID: r.ID, StartedAt: r.Started, RunningMS: ms(time.Since(r.Started)),
		TimeoutMS: ms(r.Timeout)}
}
