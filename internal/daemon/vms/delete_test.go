package vms

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// done runs f in the background; its channel gets f's error.
func done(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func notYet(t *testing.T, ch <-chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned early: %v", what, err)
	case <-time.After(200 * time.Millisecond):
	}
}

func within(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	return polltest.Receive(t, ch, 5*time.Second, what+" to return")
}

// bootHeld starts a boot whose guest does not answer until release, and
// returns the VM once it is live (its boot holding it).
func (f *fixture) bootHeld(t *testing.T) (id string, boot <-chan error, release func()) {
	t.Helper()
	release = f.b.HoldReady()
	boot = done(func() error { _, err := f.m.Boot(context.Background(), f.fn, 0); return err })
	waitFor(t, "the booting vm live", func() bool { live, _ := f.m.Count(); return live == 1 })
	vms, err := f.m.List(context.Background())
	if err != nil || len(vms) != 1 {
		t.Fatalf("vms %v %v", vms, err)
	}
	return vms[0].ID, boot, release
}

func (f *fixture) gone(t *testing.T, id string) {
	t.Helper()
	if _, err := f.db.GetVM(context.Background(), id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("deleted vm %s: %v", id, err)
	}
	if _, ok := f.m.Live(id); ok {
		t.Errorf("deleted vm %s still live", id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.forgotten) == 0 || f.forgotten[len(f.forgotten)-1] != id {
		t.Errorf("the pools did not forget %s: %v", id, f.forgotten)
	}
}

// A delete waits for what holds the VM (here its boot), then stops it and
// forgets it; the boot is not cut short.
func TestDeleteWaitsForTheBoot(t *testing.T) {
	f := newFixture(t, nil)
	id, boot, release := f.bootHeld(t)
	del := done(func() error { return f.m.Delete(context.Background(), id, "") })
	notYet(t, del, "a delete of a booting vm")
	if _, err := f.m.Lock(context.Background(), id, catalog.StateBooting, catalog.StateRunning); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("lock of a vm being deleted: %v", err)
	}
	release()
	if err := within(t, boot, "the boot"); err != nil {
		t.Fatalf("boot: %v", err)
	}
	if err := within(t, del, "the delete"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	f.gone(t, id)
}

// A forced delete kills the VMM of a VM in use at once: its holder's work
// (the boot) fails, and the VM says why.
func TestForcedDeleteDuringTheBoot(t *testing.T) {
	f := newFixture(t, nil)
	id, boot, release := f.bootHeld(t)
	defer release()
	lv, _ := f.m.Live(id)
	if err := within(t, done(func() error { return f.m.Delete(context.Background(), id, WhyForced) }), "the delete"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if err := within(t, boot, "the boot"); !errors.Is(err, errdefs.ErrVMFailed) {
		t.Fatalf("boot of a vm deleted with force: %v", err)
	}
	if why := lv.KilledBy.Load(); why == nil || *why != WhyForced {
		t.Errorf("killed by %v", why)
	}
	f.gone(t, id)
	if live, uids := f.m.Count(); live != 0 || uids != 0 || f.released.Load() != 1 {
		t.Errorf("after the delete: %d live, %d uids, %d released", live, uids, f.released.Load())
	}
}

// A VM recorded live before its VMM is up (its start under way) is
// deleted once the start has made it live, not before: deleted first, the
// start would record it again.
func TestDeleteWaitsForTheStart(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	rec := &catalog.VM{ID: newID(), Function: f.fn.Name, State: catalog.StateBooting}
	if err := f.db.PutVM(ctx, rec); err != nil {
		t.Fatal(err)
	}
	del := done(func() error { return f.m.Delete(ctx, rec.ID, "") })
	notYet(t, del, "a delete of a vm being started")
	spec := f.m.BaseSpec(rec.ID, f.fn)
	spec.Memory = vmm.Memory{Path: filepath.Join(spec.RunDir, "memory"), Shared: true}
	release, _ := f.m.d.Admit(ctx, f.fn)
	lv, err := f.m.Start(ctx, rec, spec, f.fn, release)
	if err != nil {
		t.Fatal(err)
	}
	if err := within(t, del, "the delete"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	f.gone(t, rec.ID)
	waitFor(t, "the vmm gone", lv.Exited)
}
