package lifecycle

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// A delete racing a start: a VM the catalog records booting gets its VMM
// only after the delete began, and a cold start holds the function's
// gate. The delete waits for both, stops the new VM too, and holds the
// name all along (the daemon starts no VM of a function being deleted).
func TestDeleteRacingAStart(t *testing.T) {
	m, f := newFake(t)
	ctx := context.Background()
	f.function("echo")
	f.vm("echo", "vm-new", catalog.StateBooting, "", false) // recorded, its process not up yet
	gate := f.gate("echo")
	gate.RLock() // a cold start under way
	var coldDone atomic.Bool
	go func() {
		time.Sleep(150 * time.Millisecond)
		f.mu.Lock()
		f.live["vm-new"] = liveFake{fn: "echo", runDir: t.TempDir()}
		f.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		coldDone.Store(true)
		gate.RUnlock()
	}()
	var deletingAtEnd atomic.Bool
	f.onEndVM = func(string) { deletingAtEnd.Store(m.Deleting("echo")) }
	res, err := m.DeleteFunctionWith(ctx, "echo", true)
	if err != nil {
		t.Fatal(err)
	}
	if !coldDone.Load() {
		t.Error("the delete ended while a cold start held the function's gate")
	}
	if !slices.Equal(f.ended, []string{"vm-new"}) || !deletingAtEnd.Load() {
		t.Errorf("ended %v (deleting then: %v)", f.ended, deletingAtEnd.Load())
	}
	if !slices.Equal(res.VMs, []wire.DeletedVM{{ID: "vm-new", State: catalog.StateBooting}}) {
		t.Errorf("vms %+v", res.VMs)
	}
	checkGone(t, f, "echo", nil)
	if m.Deleting("echo") {
		t.Error("the name is still marked")
	}
}

// A VM that stays recorded as starting with no process past the boot
// timeout fails the delete before anything else of the function goes.
func TestDeleteGivesUpOnAStartThatNeverComes(t *testing.T) {
	m, f := newFake(t)
	m.cfg.BootTimeout = 200 * time.Millisecond
	ctx := context.Background()
	f.function("echo")
	f.vm("echo", "vm-stuck", catalog.StateBooting, "", false)
	f.snapshot("echo", "snap-1", 0, false, false)
	_, err := m.DeleteFunctionWith(ctx, "echo", true)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "vm-stuck") || !strings.Contains(err.Error(), "still starting") {
		t.Fatalf("delete with a start stuck: %v", err)
	}
	if _, err := f.db.GetFunction(ctx, "echo"); err != nil || len(f.deleted) > 0 {
		t.Errorf("a failed delete went on: function %v, snapshots deleted %v", err, f.deleted)
	}
	if !f.gate("echo").TryLock() || m.Deleting("echo") {
		t.Error("the failed delete left the gate held or the name marked")
	}
}

// The claims on a name: one create at a time and nothing else with it;
// deploys side by side but no create; one delete and nothing else, and
// Deleting says so while it lasts.
func TestNameClaims(t *testing.T) {
	m, f := newFake(t)
	ctx := context.Background()
	release, err := m.ClaimCreate("echo")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.ClaimCreate("echo"); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a second create: %v", err)
	}
	if _, err := m.ClaimDeploy("echo"); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a deploy during a create: %v", err)
	}
	if _, err := m.BeginDelete("echo"); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("a delete during a create: %v", err)
	}
	if _, err := m.ClaimCreate("other"); err != nil {
		t.Errorf("another name: %v", err)
	}
	release()
	d1, err := m.ClaimDeploy("echo")
	if err != nil {
		t.Fatal(err)
	}
	d2, err := m.ClaimDeploy("echo")
	if err != nil {
		t.Fatalf("a second deploy: %v", err)
	}
	if _, err := m.ClaimCreate("echo"); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a create during deploys: %v", err)
	}
	f.function("echo")
	if _, err := m.DeleteFunctionWith(ctx, "echo", true); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "deployed") {
		t.Errorf("a delete during deploys: %v", err)
	}
	d1()
	if _, err := m.ClaimCreate("echo"); !errors.Is(err, errdefs.ErrExists) {
		t.Errorf("a create while one deploy is left: %v", err)
	}
	d2()
	end, err := m.BeginDelete("echo")
	if err != nil {
		t.Fatal(err)
	}
	if !m.Deleting("echo") || m.Deleting("other") {
		t.Error("Deleting during the delete")
	}
	if _, err := m.DeleteFunctionWith(ctx, "echo", true); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("a second delete: %v", err)
	}
	end()
	if m.Deleting("echo") {
		t.Error("Deleting after the delete")
	}
	if r, err := m.ClaimCreate("echo"); err != nil {
		t.Errorf("the name after all ended: %v", err)
	} else {
		r()
	}
}
