package restorer

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// A restore without a standby VM starts a VMM of its own in the room it
// was admitted to, loads the snapshot's device state, resumes, renews the
// guest and records the VM running; the VM comes back locked.
func TestRestoreStartsVMM(t *testing.T) {
	w := newWorld(t)
	w.pool.size = 1
	vm, rec, tm, err := w.r.Restore(context.Background(), w.row, w.opts(t, "vanilla"))
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Unlock()
	if !vm.locked.Load() {
		t.Error("the restored vm came back unlocked")
	}
	if len(w.vms.started) != 1 || w.vms.started[0] != vm {
		t.Fatalf("started %d vmms, want the restored vm's", len(w.vms.started))
	}
	if want := filepath.Join(w.row.Sn.Dir, snapshot.StateFile); vm.m.loaded != want || !vm.m.resumed {
		t.Errorf("device state %q (want %q), resumed %v", vm.m.loaded, want, vm.m.resumed)
	}
	if vm.sess == nil || vm.sess.Kind() != restore.Vanilla || !vm.resuming || len(vm.renewals) != 1 || len(vm.renewals[0].Entropy) != 64 {
		t.Errorf("session %v, counters at resume %v, renewals %+v", vm.sess, vm.resuming, vm.renewals)
	}
	if rec.State != catalog.StateRunning || w.db.vms[rec.ID] == nil || w.db.vms[rec.ID].Strategy != "vanilla" ||
		rec.Snapshot != w.row.Sn.ID {
		t.Errorf("record %+v, catalog %+v", rec, w.db.vms[rec.ID])
	}
	if tm.VMM != "started" || tm.Source != "local" {
		t.Errorf("timing %+v", tm)
	}
	if w.admitted.Load() != 1 {
		t.Errorf("%d rooms held, want the vm's", w.admitted.Load())
	}
	if strings.Join(w.hits, ",") != "miss vanilla" {
		t.Errorf("pool hits %v", w.hits)
	}
	if w.pool.restores.Load() != 0 {
		t.Error("the restore is still counted under way")
	}
}

// A standby VM of the VMM pool serves a restore of its snapshot and
// strategy: no VMM starts, the room the restore was admitted to goes
// back (the standby holds its own), and the timing says "pooled".
func TestRestoreTakesStandby(t *testing.T) {
	w := newWorld(t)
	w.pool.size = 1
	sb, rec, plan, err := w.r.StartStandby(context.Background(), w.row.Sn.ID, restore.Vanilla, func() {})
	if err != nil {
		t.Fatal(err)
	}
	if sb.locked.Load() || sb.m.loaded != "" {
		t.Fatalf("a standby vm came back locked (%v) or with its device state loaded (%q)", sb.locked.Load(), sb.m.loaded)
	}
	w.pool.standby[w.row.Sn.ID+"/vanilla"] = []standbyVM{{sb, rec, plan}}
	o := w.opts(t, "vanilla")
	released := false
	o.Admitted = func() { released = true }
	vm, _, tm, err := w.r.Restore(context.Background(), w.row, o)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Unlock()
	if vm != sb || len(w.vms.started) != 1 {
		t.Fatalf("restored on %s with %d vmms started, want the standby %s and no start", vm.id, len(w.vms.started), sb.id)
	}
	if !released || tm.VMM != "pooled" || !sb.m.resumed || len(sb.renewals) != 1 {
		t.Errorf("room given back %v, timing %+v, resumed %v, renewals %d", released, tm, sb.m.resumed, len(sb.renewals))
	}
	if strings.Join(w.hits, ",") != "hit vanilla" {
		t.Errorf("pool hits %v", w.hits)
	}
	if want := []string{sb.id + " booting", sb.id + " running"}; strings.Join(w.vms.marks, ",") != strings.Join(want, ",") {
		t.Errorf("marks %v, want %v", w.vms.marks, want)
	}
}

// A restore whose device state does not load is cleaned up: the VM is
// stopped failed with the step and the VMM's exit in its reason, its lock
// given back, and the error is ErrVMFailed. A strategy that failed first
// is named as the cause.
func TestFailedRestoreIsCleanedUp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		strategy bool // the strategy failed before the step
		want     []string
	}{
		{"load", false, []string{"restore from snap-000000000001: load device state: bad state", "vm process exited: load refused"}},
		{"strategy first", true, []string{"vanilla strategy: fault server gone (then: load device state: bad state)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.vms.machine = func() *fakeMachine {
				m := newMachine()
				m.loadErr = errors.New("bad state")
				m.end("load refused")
				return m
			}
			if tc.strategy {
				w.vms.machine = func() *fakeMachine { m := newMachine(); m.loadErr = errors.New("bad state"); return m }
				w.vms.startHook = func(vm *fakeVM) { vm.FailStrategy("fault server gone") }
			}
			_, _, _, err := w.r.Restore(context.Background(), w.row, w.opts(t, "vanilla"))
			if !errors.Is(err, errdefs.ErrVMFailed) {
				t.Fatalf("restore with a bad device state: %v, want ErrVMFailed", err)
			}
			stops := w.vms.stopped()
			if len(stops) != 1 || stops[0].state != catalog.StateFailed || !stops[0].locked {
				t.Fatalf("stops %+v, want the vm stopped failed under its lock", stops)
			}
			for _, want := range tc.want {
				if !strings.Contains(stops[0].reason, want) || !strings.Contains(err.Error(), want) {
					t.Errorf("reason %q / error %q lack %q", stops[0].reason, err, want)
				}
			}
			if stops[0].vm.locked.Load() {
				t.Error("the failed vm is still locked")
			}
			if len(w.db.vms) != 0 {
				t.Errorf("a failed restore recorded %d vms", len(w.db.vms))
			}
		})
	}
}

// A restore whose strategy cannot begin starts no VMM, gives its room
// back and leaves no run directory.
func TestFailedPlanStartsNothing(t *testing.T) {
	w := newWorld(t)
	w.r.d.Strategies = func() []restore.Strategy {
		st := w.strategyOf(restore.Vanilla, errors.New("no artifacts"))
		st.Fallback = false
		return []restore.Strategy{st}
	}
	_, _, _, err := w.r.Restore(context.Background(), w.row, w.opts(t, "vanilla"))
	if !errors.Is(err, errdefs.ErrVMFailed) || !strings.Contains(err.Error(), "no artifacts") {
		t.Fatalf("restore with a strategy that cannot begin: %v", err)
	}
	if len(w.vms.started) != 0 || w.admitted.Load() != 0 {
		t.Errorf("%d vmms started, %d rooms held", len(w.vms.started), w.admitted.Load())
	}
	if ents, _ := os.ReadDir(w.vms.runDir); len(ents) != 0 {
		t.Errorf("run directories left: %v", ents)
	}
}

// A strict restore refuses the fallback its strategy would take: a
// conflict that says why, no VMM started, the room given back. It does
// not take a standby VM whose session fell back either: that VM is
// retired and the restore starts a VMM of its own.
func TestStrictRefusesFallback(t *testing.T) {
	w := newWorld(t)
	broken := w.strategyOf(restore.Premap, errors.New("no store copy"))
	w.r.d.Strategies = func() []restore.Strategy { return []restore.Strategy{w.strategyOf(restore.Vanilla, nil), broken} }
	o := Strict(w.opts(t, "premap"))
	_, _, _, err := w.r.Restore(context.Background(), w.row, o)
	if !errors.Is(err, restore.ErrFallbackRefused) {
		t.Fatalf("strict premap without its artifacts: %v, want a refused fallback", err)
	}
	err = RefusedFallback(err)
	if !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "premap cannot restore snap-000000000001") ||
		!strings.Contains(err.Error(), "without strict the invocation would run as vanilla") {
		t.Errorf("refusal %q", err)
	}
	if len(w.vms.started) != 0 || w.admitted.Load() != 0 {
		t.Errorf("a refused restore started %d vmms and holds %d rooms", len(w.vms.started), w.admitted.Load())
	}
	if other := errors.New("other"); RefusedFallback(other) != other {
		t.Error("RefusedFallback changed an error that is no refusal")
	}

	// A standby VM that fell back is not taken by a strict restore.
	w.pool.size = 1
	sb, rec, plan, err := w.r.StartStandby(context.Background(), w.row.Sn.ID, restore.Vanilla, func() {})
	if err != nil {
		t.Fatal(err)
	}
	plan.sess.(*fakeSession).fallback = "premap artifacts unusable"
	w.pool.standby[w.row.Sn.ID+"/vanilla"] = []standbyVM{{sb, rec, plan}}
	vm, _, tm, err := w.r.Restore(context.Background(), w.row, Strict(w.opts(t, "vanilla")))
	if err != nil {
		t.Fatal(err)
	}
	vm.Unlock()
	if vm == sb || tm.VMM != "started" || len(w.pool.retired) != 1 || !strings.HasPrefix(w.pool.retired[0], sb.id+": a strict restore") {
		t.Errorf("strict restore on %s (%s), retired %v; the standby that fell back was %s", vm.id, tm.VMM, w.pool.retired, sb.id)
	}
}

// A standby VM whose strategy cannot attach to its VMM is stopped.
func TestStandbyStrategyFails(t *testing.T) {
	w := newWorld(t)
	st := w.strategyOf(restore.Vanilla, nil)
	begin := st.Begin
	st.Begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		s, err := begin(ctx, snap, env)
		s.(*fakeSession).startErr = errors.New("no working set")
		return s, err
	}
	w.r.d.Strategies = func() []restore.Strategy { return []restore.Strategy{st} }
	_, _, _, err := w.r.StartStandby(context.Background(), w.row.Sn.ID, restore.Vanilla, func() {})
	if err == nil || !strings.Contains(err.Error(), "vanilla strategy: no working set") {
		t.Fatalf("standby with a failing strategy: %v", err)
	}
	stops := w.vms.stopped()
	if len(stops) != 1 || stops[0].state != catalog.StateFailed || !strings.HasPrefix(stops[0].reason, "standby for snap-000000000001") {
		t.Errorf("stops %+v", stops)
	}
	if released := false; true {
		_, _, _, err = w.r.StartStandby(context.Background(), "snap-gone", restore.Vanilla, func() { released = true })
		if err == nil || !released {
			t.Errorf("standby of a missing snapshot: %v, room given back %v", err, released)
		}
	}
}

// A VM whose strategy reports it can no longer serve its memory is
// killed, and the VM records why.
func TestWatchStrategyKills(t *testing.T) {
	w := newWorld(t)
	failed := make(chan error, 1)
	st := w.strategyOf(restore.Vanilla, nil)
	begin := st.Begin
	st.Begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		s, err := begin(ctx, snap, env)
		s.(*fakeSession).failed = failed
		return s, err
	}
	w.r.d.Strategies = func() []restore.Strategy { return []restore.Strategy{st} }
	vm, _, _, err := w.r.Restore(context.Background(), w.row, w.opts(t, "vanilla"))
	if err != nil {
		t.Fatal(err)
	}
	vm.Unlock()
	failed <- errors.New("fault server stopped")
	select {
	case <-vm.m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the vm whose strategy failed was not stopped")
	}
	if why := vm.StrategyFailure(); why == nil || *why != "fault server stopped" {
		t.Errorf("strategy failure %v", why)
	}
}

// Strategy finds offered strategies by name; an unknown name, or one the
// daemon does not offer, is invalid.
func TestStrategyLookup(t *testing.T) {
	w := newWorld(t)
	if st, err := w.r.Strategy(""); err != nil || st.Kind != restore.Default {
		t.Errorf("default strategy: %v %v", st.Kind, err)
	}
	for _, name := range []string{"fastest", "reap"} {
		if _, err := w.r.Strategy(name); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("strategy %q: %v, want ErrInvalid", name, err)
		}
	}
}

// RestoreVM restores with the named strategy, refills the VMM pool behind
// the restore and hands the VM back unlocked.
func TestRestoreVM(t *testing.T) {
	w := newWorld(t)
	w.pool.size = 2
	rec, tm, err := w.r.RestoreVM(context.Background(), w.row.Sn.ID, "vanilla")
	if err != nil || rec.State != catalog.StateRunning || tm == nil {
		t.Fatalf("RestoreVM: %v %+v", err, rec)
	}
	if w.vms.started[0].locked.Load() {
		t.Error("RestoreVM left its vm locked")
	}
	waitFor(t, func() bool {
		w.pool.mu.Lock()
		defer w.pool.mu.Unlock()
		return len(w.pool.refills) == 1 && w.pool.refills[0] == w.row.Sn.ID+"/vanilla"
	})
	if _, _, err := w.r.RestoreVM(context.Background(), "snap-gone", "vanilla"); err == nil {
		t.Error("RestoreVM of a missing snapshot succeeded")
	}
}

func waitFor(t *testing.T, ok func() bool) {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatal("timed out")
}
