package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/problemtest"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
)

// readyService is a daemon on the fake VMM with ready clones on (and the
// VMM pool off, so every VMM start is a restore's or a fill's).
func readyService(t *testing.T, edit func(*Config)) (*Service, *catalogFake) {
	t.Helper()
	s, b := fakeService(t, func(c *Config) {
		c.KeepAlive, c.VMMPool = -1, -1
		c.Ready = ReadyConfig{MemoryMiB: 4096, Interval: 20 * time.Millisecond, Window: 3 * time.Second}
		if edit != nil {
			edit(c)
		}
	})
	return s, &catalogFake{s: s, b: b}
}

// catalogFake reads what the tests check.
type catalogFake struct {
	s *Service
	b interface {
		Specs() []vmm.Spec
		Secrets() []map[string]string
		Renewals() []string
		SetAgentProtocol(int)
		SetStart(func(vmm.Spec) error)
	}
}

// readyVMs are the catalog's VMs in state ready.
func (c *catalogFake) readyVMs(t *testing.T) []*catalog.VM {
	t.Helper()
	vms, err := c.s.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []*catalog.VM
	for _, v := range vms {
		if v.State == catalog.StateReady {
			out = append(out, v)
		}
	}
	return out
}

func invokeFn(t *testing.T, s *Service, fn, event string) *Invocation {
	t.Helper()
	inv, err := s.InvokeCold(context.Background(), ColdRequest{Function: fn, InvokeRequest: InvokeRequest{Event: json.RawMessage(event)}})
	if err != nil {
		t.Fatal(err)
	}
	if !inv.OK {
		t.Fatalf("invocation failed: %+v", inv.Error)
	}
	return inv
}

// A function's first invocation misses and says so; a ready clone is then
// restored, warmed and recorded ready (not invocable by id), and the next
// invocations each get one that has served nothing, renewed at dispatch
// (with the function's secrets), their timing saying how long it waited.
func TestReadyClonesServeFreshClones(t *testing.T) {
	s, c := readyService(t, nil)
	ctx := context.Background()
	if _, _, err := s.SetSecret(ctx, "token", []byte("s3cret-value")); err != nil {
		t.Fatal(err)
	}
	booted, snap := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "echo", Secrets: map[string]string{"TOKEN": "token"}})
	s.DeleteVM(ctx, booted.ID)
	first := invokeFn(t, s, "echo", `{"op":"served"}`)
	if first.Mode != "cold" || first.Timing.Ready == nil || first.Timing.Ready.Hit || first.Timing.Ready.Fallback != "none ready" {
		t.Fatalf("first invocation: mode %s, ready %+v", first.Mode, first.Timing.Ready)
	}
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return len(c.readyVMs(t)) == 1 && s.ready.Count() == 1 })
	rv := c.readyVMs(t)[0]
	if rv.Snapshot != snap.ID || rv.PID == 0 {
		t.Fatalf("ready clone record: %+v", rv)
	}
	if _, err := s.InvokeVM(ctx, rv.ID, InvokeRequest{Event: json.RawMessage(`1`)}); !errors.Is(err, ErrConflict) {
		t.Fatalf("a warm invocation of a ready clone by id: %v, want a conflict", err)
	}
	renewals := len(c.b.Secrets())
	for i := range 4 {
		waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
		inv := invokeFn(t, s, "echo", `{"op":"served"}`)
		r := inv.Timing.Ready
		if inv.Mode != "ready" || r == nil || !r.Hit || r.WaitedMS <= 0 || r.RenewMS <= 0 || r.Fallback != "" {
			t.Fatalf("invocation %d: mode %s, ready %+v", i, inv.Mode, r)
		}
		if string(inv.Result) != "0" {
			t.Fatalf("invocation %d ran on a clone that had served %s invocations", i, inv.Result)
		}
		if inv.Snapshot != snap.ID || inv.Timing.TotalMS < r.RenewMS+inv.Timing.InvokeMS {
			t.Fatalf("invocation %d: %+v", i, inv.Timing)
		}
		for _, v := range c.readyVMs(t) {
			if v.ID == inv.VM {
				t.Fatalf("the clone of invocation %d is listed ready after its answer", i)
			}
		}
		if inv.Timing.TeardownMS != 0 {
			t.Fatalf("invocation %d waited for its clone's teardown (%.1f ms)", i, inv.Timing.TeardownMS)
		}
		waitFor(t, 5*time.Second, "the clone stopped after its answer", func() bool {
			_, err := s.GetVM(ctx, inv.VM)
			return errors.Is(err, ErrNotFound)
		})
	}
	// Each clone was renewed at its restore and again at dispatch, with
	// the secret both times.
	got := c.b.Secrets()[renewals:]
	if len(got) < 7 { // 4 at dispatch, 3 fills of the clones hits 2-4 took (the last refill may still run)
		t.Fatalf("%d renewals for 4 ready invocations and their refills, want at least 7", len(got))
	}
	for _, sec := range got {
		if sec["TOKEN"] != "s3cret-value" {
			t.Fatalf("a renewal without the secret: %v", sec)
		}
	}
	waitFor(t, 5*time.Second, "the last refill", func() bool { return s.ready.Count() == 1 })
	text := promText(t, s)
	for _, want := range []string{`thaw_ready_clones_total{outcome="hit"} 4`, `thaw_ready_clones_total{outcome="miss"} 1`,
		`thaw_ready_clone_wait_seconds_count 4`, `thaw_vms{state="ready"} 1`} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if !strings.Contains(text, `thaw_ready_clone_refills_total{outcome="ok"}`) || !strings.Contains(text, "thaw_ready_clones_memory_mib") {
		t.Error("metrics lack refills or memory")
	}
}

// A ready clone's fill renews it without the function's on_restore hook
// and its dispatch with it, the event on the renewal's line: the hook runs
// once per clone and a hit takes one round trip. An agent before protocol
// 6 (a snapshot of an older image) gets today's requests: the renewal
// alone, with the hook, at the fill and at dispatch, then the event. Either
// way the warm-up ran no invocation of the function.
func TestReadyCloneRenewalOnce(t *testing.T) {
	for _, tc := range []struct {
		proto       int
		fill, hit   string
		hitRenewals int // requests with the hook per hit
	}{{6, "nohook", "invoke", 1}, {5, "", "", 2}} {
		t.Run("protocol "+strconv.Itoa(tc.proto), func(t *testing.T) {
			s, c := readyService(t, nil)
			c.b.SetAgentProtocol(tc.proto)
			booted, _ := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "echo"})
			s.DeleteVM(context.Background(), booted.ID)
			invokeFn(t, s, "echo", `{"op":"served"}`) // a miss: a cold start, then a fill
			waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
			mark := len(c.b.Renewals())
			for i := range 3 {
				waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
				inv := invokeFn(t, s, "echo", `{"op":"served"}`)
				if r := inv.Timing.Ready; inv.Mode != "ready" || r == nil || !r.Hit || r.RenewMS <= 0 || inv.Timing.InvokeMS <= 0 {
					t.Fatalf("invocation %d: mode %s, timing %+v", i, inv.Mode, inv.Timing)
				}
				if string(inv.Result) != "0" {
					t.Fatalf("invocation %d ran on a clone that had served %s invocations", i, inv.Result)
				}
			}
			waitFor(t, 5*time.Second, "the last refill", func() bool { return s.ready.Count() == 1 })
			n := map[string]int{}
			for _, m := range c.b.Renewals()[mark:] {
				n[m]++
			}
			if tc.fill == tc.hit { // older agent: every renewal alone, with the hook
				if len(n) != 1 || n[""] < 3*tc.hitRenewals {
					t.Fatalf("renewals %v, want only full ones, at least %d", n, 3*tc.hitRenewals)
				}
				return
			}
			if len(n) != 2 || n[tc.hit] != 3 || n[tc.fill] < 3 {
				t.Fatalf("renewals %v, want 3 %q and at least 3 %q", n, tc.hit, tc.fill)
			}
		})
	}
}

// With keep-alive, a ready clone's VM is kept after its request like any
// other; the next request still takes a ready clone before a kept VM.
func TestReadyClonesBeforeKeepAlive(t *testing.T) {
	s, _ := readyService(t, func(c *Config) { c.KeepAlive = time.Minute })
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	invokeFn(t, s, "echo", `1`) // cold, kept
	for i := range 3 {
		waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
		inv := invokeFn(t, s, "echo", `{"op":"served"}`)
		if inv.Mode != "ready" || string(inv.Result) != "0" {
			t.Fatalf("invocation %d: mode %s, served before %s", i, inv.Mode, inv.Result)
		}
	}
	if n := s.pool.Idle(); n != 2 {
		t.Fatalf("%d kept vms, want 2 (keep-alive's limit)", n)
	}
}

// A ready clone that died while waiting is never handed out: the request
// falls back to a restore and says why.
func TestReadyCloneDeadFallsBack(t *testing.T) {
	s, c := readyService(t, nil)
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	invokeFn(t, s, "echo", `1`)
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return len(c.readyVMs(t)) == 1 && s.ready.Count() == 1 })
	rv := c.readyVMs(t)[0]
	if err := syscall.Kill(rv.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the daemon to see it die", func() bool {
		v, err := s.GetVM(ctx, rv.ID)
		return err == nil && v.State == catalog.StateFailed
	})
	inv := invokeFn(t, s, "echo", `{"op":"served"}`)
	r := inv.Timing.Ready
	if inv.Mode != "cold" || r == nil || r.Hit || !strings.Contains(r.Fallback, rv.ID) || !strings.Contains(r.Fallback, "died") {
		t.Fatalf("after the clone died: mode %s on %s, ready %+v", inv.Mode, inv.VM, r)
	}
	if inv.VM == rv.ID || string(inv.Result) != "0" {
		t.Fatalf("served by %s (served %s before)", inv.VM, inv.Result)
	}
	v, err := s.GetVM(ctx, rv.ID)
	if err != nil || v.State != catalog.StateFailed {
		t.Fatalf("the dead clone's record: %+v %v", v, err)
	}
	if !strings.Contains(promText(t, s), `thaw_ready_clones_total{outcome="failed"} 1`) {
		t.Error("the dead clone was not counted")
	}
	// The pool refills with a live one.
	waitFor(t, 5*time.Second, "a new ready clone", func() bool { return s.ready.Count() == 1 })
	if inv := invokeFn(t, s, "echo", `1`); inv.Mode != "ready" {
		t.Fatalf("after the refill: mode %s", inv.Mode)
	}
}

// Deleting a function (cascade) or a snapshot drains its ready clones, and
// none comes back.
func TestReadyClonesDrainOnDelete(t *testing.T) {
	s, c := readyService(t, nil)
	ctx := context.Background()
	booted, snap := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	invokeFn(t, s, "echo", `1`)
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
	if err := s.DeleteSnapshot(ctx, snap.ID); err != nil {
		t.Fatalf("delete a snapshot with a ready clone: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if n, vms := s.ready.Count(), c.readyVMs(t); n != 0 || len(vms) != 0 {
		t.Fatalf("%d ready clones (%d recorded) after their snapshot was deleted", n, len(vms))
	}
	_, snap2 := snapshotOf(t, s, "echo")
	vms, _ := s.ListVMs(ctx)
	for _, v := range vms {
		if v.Live() {
			s.DeleteVM(ctx, v.ID)
		}
	}
	invokeFn(t, s, "echo", `1`)
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	vms, _ = s.ListVMs(ctx)
	for _, v := range vms {
		if v.Live() {
			t.Fatalf("vm %s of the deleted function is %s", v.ID, v.State)
		}
	}
	if s.ready.Count() != 0 {
		t.Fatal("ready clones of a deleted function")
	}
	if !strings.Contains(promText(t, s), `thaw_ready_clone_drops_total{reason="deleted"} 2`) {
		t.Error("the drains were not counted as deleted")
	}
	_ = snap2
}

// A clone that waited its longest is replaced by a fresh one; a function
// idle for the window decays to none.
func TestReadyClonesAgeAndDecay(t *testing.T) {
	s, _ := readyService(t, func(c *Config) { c.Ready.MaxAge, c.Ready.Window = 300*time.Millisecond, 1500*time.Millisecond })
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	invokeFn(t, s, "echo", `1`)
	waitFor(t, 5*time.Second, "a clone recycled", func() bool {
		return strings.Contains(promText(t, s), `thaw_ready_clone_drops_total{reason="aged"}`)
	})
	waitFor(t, 5*time.Second, "decay to none", func() bool {
		keys := len(s.ready.DemandKeys())
		return keys == 0 && s.ready.Count() == 0 && s.ready.Filling() == 0
	})
	time.Sleep(300 * time.Millisecond)
	if n := s.ready.Count(); n != 0 {
		t.Fatalf("%d ready clones for an idle function", n)
	}
	// Every clone started was stopped: aged, or surplus once demand fell.
	text := promText(t, s)
	started := metricValue(text, `thaw_ready_clone_refills_total{outcome="ok"}`)
	stopped := metricValue(text, `thaw_ready_clone_drops_total{reason="aged"}`) + metricValue(text, `thaw_ready_clone_drops_total{reason="surplus"}`)
	if started < 2 || stopped != started {
		t.Errorf("%v clones started, %v stopped:\n%s", started, stopped, grepLines(text, "thaw_ready"))
	}
	// --min-ready keeps clones of a function with traffic even idle.
	m, _ := readyService(t, func(c *Config) { c.Ready.MinReady, c.Ready.Window = 2, 500*time.Millisecond })
	booted, _ = bootAndSnapshot(t, m, "echo")
	m.DeleteVM(ctx, booted.ID)
	invokeFn(t, m, "echo", `1`)
	waitFor(t, 5*time.Second, "two ready clones", func() bool { return m.ready.Count() == 2 })
	time.Sleep(time.Second) // two windows without a request
	if n := m.ready.Count(); n != 2 {
		t.Fatalf("%d ready clones with --min-ready 2", n)
	}
}

// metricValue is the value of the sample named series in text (0 if
// absent).
func metricValue(text, series string) float64 {
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

func grepLines(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// Arrivals size the pool, and each clone counts what it measured: eight
// requests at once (within one refill time) make the function want eight
// clones. A clone counts guest RAM plus the overhead only until one of
// its key is measured (the fake VMM's process: a few MiB), so a budget of
// two such clones holds all eight, and the state sums what they measured.
func TestReadyClonesSizedFromArrivals(t *testing.T) {
	const perClone = 128 + DefaultVMMemoryOverheadMiB
	s, cf := readyService(t, func(c *Config) { c.Ready.MemoryMiB, c.Ready.Fills, c.Ready.Window = 2*perClone, 2, 20*time.Second })
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			invokeFn(t, s, "echo", `{"op":"sleep","ms":500}`)
		}()
	}
	wg.Wait()
	waitFor(t, 20*time.Second, "eight ready clones", func() bool { return s.ready.Count() == 8 })
	time.Sleep(300 * time.Millisecond)
	if n := s.ready.Count(); n != 8 {
		t.Fatalf("%d ready clones, want 8", n)
	}
	if st := s.ready.State(); st.Clones != 8 || st.MemoryMiB < 8 || st.MemoryMiB > 2*perClone {
		t.Fatalf("ready state %+v: want 8 clones counting what they measured (1 MiB or more each, %d MiB in all at most)", st, 2*perClone)
	}
	// The VM listing shows what each counts: the state's sum, clone by clone.
	listed, sum := cf.readyVMs(t), 0
	for _, v := range listed {
		got, err := s.GetVM(ctx, v.ID)
		if err != nil || v.ReadyMiB <= 0 || got.ReadyMiB != v.ReadyMiB {
			t.Fatalf("ready clone %s listed counting %d MiB, got %+v (%v)", v.ID, v.ReadyMiB, got, err)
		}
		sum += v.ReadyMiB
	}
	if st := s.ready.State(); len(listed) != 8 || sum != st.MemoryMiB {
		t.Fatalf("%d ready clones listed counting %d MiB; the state %+v", len(listed), sum, st)
	}
}

// Ready clones give way first: a start that needs room stops a ready
// clone, not a kept VM; so does low host memory.
func TestReadyClonesGiveWayFirst(t *testing.T) {
	var low atomic.Int32
	oldAvail, oldEvery := hostAvailable, pressureInterval
	hostAvailable = func() (int, bool) {
		if low.Add(-1) >= 0 {
			return 1, true
		}
		return 1 << 20, true
	}
	pressureInterval = 20 * time.Millisecond
	t.Cleanup(func() { hostAvailable, pressureInterval = oldAvail, oldEvery })
	s, _ := readyService(t, func(c *Config) {
		c.KeepAlive, c.MaxVMs, c.KeepAliveMinAvailableMiB = time.Minute, 2, 100
	})
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	invokeFn(t, s, "echo", `1`) // cold, then kept
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
	// Host memory low once: the ready clone goes, the kept VM stays.
	low.Store(1)
	waitFor(t, 5*time.Second, "the pressure reading", func() bool { return low.Load() < 0 })
	if !strings.Contains(promText(t, s), `thaw_ready_clone_drops_total{reason="memory_pressure"} 1`) || s.pool.Idle() != 1 {
		t.Fatalf("after low memory: %d kept vms\n%s", s.pool.Idle(), grepLines(promText(t, s), "drops"))
	}
	waitFor(t, 5*time.Second, "a ready clone again", func() bool { return s.ready.Count() == 1 })
	// Two VMs at most: kept and ready; a boot needs the room of one.
	other, _ := bootAndSnapshot(t, s, "other")
	defer s.DeleteVM(ctx, other.ID)
	if s.pool.Idle() != 1 {
		t.Fatal("the kept vm gave way before the ready clone")
	}
	if !strings.Contains(promText(t, s), `thaw_ready_clone_drops_total{reason="room"} 1`) {
		t.Errorf("the ready clone did not give way:\n%s", grepLines(promText(t, s), "thaw_ready"))
	}
}

// A slow refill never holds a request up: while a fill's VMM start hangs,
// the function's next request restores for itself and answers.
func TestReadyCloneSlowFillNeverBlocks(t *testing.T) {
	s, c := readyService(t, nil)
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	gate := make(chan struct{})
	var starts atomic.Int32
	c.b.SetStart(func(vmm.Spec) error {
		if starts.Add(1) == 2 { // the first request's restore is start 1, the fill after it start 2
			<-gate
		}
		return nil
	})
	defer close(gate)
	invokeFn(t, s, "echo", `1`)
	waitFor(t, 5*time.Second, "the fill to start", func() bool { return starts.Load() == 2 })
	done := make(chan *Invocation)
	go func() { done <- invokeFn(t, s, "echo", `{"op":"served"}`) }()
	select {
	case inv := <-done:
		if inv.Mode != "cold" || inv.Timing.Ready == nil || inv.Timing.Ready.Fallback != "none ready" {
			t.Fatalf("during a slow fill: mode %s, ready %+v", inv.Mode, inv.Timing.Ready)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a request waited for a slow fill")
	}
}

// A daemon killed with ready clones running leaves them recorded live: the
// next start reconciles them like any VM (their process is killed if it is
// still there, the record marked failed), so none stays ready.
func TestReadyClonesReconciledAtStart(t *testing.T) {
	h := vmmtest.NewHost(t, "thaw-unit-")
	db, err := catalog.Open(filepath.Join(h.DataDir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	ghost := &catalog.VM{ID: "vm-0000000ead1e", Function: "echo", State: catalog.StateReady, PID: 1 << 22, Accel: "tcg",
		MemoryMiB: 128, RunDir: filepath.Join(h.DataDir, "run", "vm-0000000ead1e"), CreatedAt: time.Now()}
	if err := db.PutVM(context.Background(), ghost); err != nil {
		t.Fatal(err)
	}
	db.Close()
	cfg := Config{DataDir: h.DataDir, ImageDir: h.ImageDir, Accel: "tcg", DefaultMemoryMiB: 128, DefaultVCPUs: 1,
		BootTimeout: 10 * time.Second, InvokeTimeout: 5 * time.Second, StoreDir: h.StoreDir,
		VMM: &vmmtest.Fake{}, Ready: ReadyConfig{MemoryMiB: 1024}}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	v, err := s.GetVM(context.Background(), ghost.ID)
	if err != nil || v.State != catalog.StateFailed || v.Live() {
		t.Fatalf("a ready clone left by a killed daemon: %+v %v", v, err)
	}
	if s.ready.Count() != 0 {
		t.Fatal("a ready clone from the last run was adopted")
	}
}

// Bad ready-clone settings are refused at start, every problem at once.
func TestReadyConfigValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		edit func(*ReadyConfig)
		want []string
	}{
		{"valid", func(r *ReadyConfig) { r.MemoryMiB, r.MinReady = 2048, 2 }, nil},
		{"negative memory", func(r *ReadyConfig) { r.MemoryMiB = -1 }, []string{"standby memory -1 MiB: must not be negative"}},
		{"window too short", func(r *ReadyConfig) { r.Window = 10 * time.Millisecond }, []string{"ready window 10ms: give 60ms or more"}},
		{"min above the cap", func(r *ReadyConfig) { r.MemoryMiB, r.MinReady = 1024, 20 }, []string{"min ready 20, max 16"}},
		{"min without memory", func(r *ReadyConfig) { r.MinReady = 1 }, []string{"min ready 1 needs ready clones"}},
		{"several", func(r *ReadyConfig) { r.MemoryMiB, r.MinReady, r.MaxAge = -5, -1, -time.Second }, []string{
			"standby memory -5 MiB", "max age, fills and interval must not be negative", "min ready -1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.edit(&c.Ready)
			c.SetDefaults()
			problemtest.Check(t, c.Validate(), tt.want)
		})
	}
}

// A fill that fails is not retried in a loop: the key waits readyRetry
// before its next fill, and the failure is counted.
func TestReadyCloneFailedFillBacksOff(t *testing.T) {
	s, c := readyService(t, nil)
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(ctx, booted.ID)
	var starts atomic.Int32
	c.b.SetStart(func(vmm.Spec) error {
		if starts.Add(1) > 1 { // the request's own restore starts; every fill fails
			return errors.New("no vmm today")
		}
		return nil
	})
	invokeFn(t, s, "echo", `1`)
	time.Sleep(1500 * time.Millisecond) // six sizing intervals
	if n := starts.Load() - 1; n != 1 {
		t.Fatalf("%d fills started within 1.5 s of a failure, want 1", n)
	}
	if !strings.Contains(promText(t, s), `thaw_ready_clone_refills_total{outcome="failed"} 1`) {
		t.Error("the failed fill was not counted")
	}
}
