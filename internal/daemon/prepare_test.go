package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/restore"
)

// testStrategies are the real vanilla and FaaSnap (whose record phase
// takes the warm snapshot) and a strategy of the test's own whose prepare
// step restores the warm snapshot, invokes it and reports what it saw;
// step, if set, replaces that step.
func testStrategies(step func(ctx context.Context, h restore.RecordHost, p *restore.Prepare) error) (*[]string, []restore.Strategy) {
	vanilla, _ := restore.Lookup(restore.Vanilla)
	faasnap, _ := restore.Lookup(restore.FaaSnap)
	var ran []string
	own := restore.Strategy{Kind: restore.REAP, Begin: vanilla.Begin, Record: step}
	if step == nil {
		own.Record = func(ctx context.Context, h restore.RecordHost, p *restore.Prepare) error {
			ran = append(ran, "own on "+p.Warm.Manifest.ID)
			vm, err := h.Restore(ctx, p.Warm, vanilla.Begin)
			if err != nil {
				return err
			}
			defer vm.Close()
			if err := vm.Invoke(ctx); err != nil {
				return err
			}
			p.SetBuild(restore.REAP, &restore.REAPBuild{FaultedPages: 7})
			return nil
		}
	}
	record := faasnap.Record
	faasnap.Record = func(ctx context.Context, h restore.RecordHost, p *restore.Prepare) error {
		ran = append(ran, "warm")
		return record(ctx, h, p)
	}
	// The own strategy comes first: prepare still runs the Warm one first.
	return &ran, []restore.Strategy{vanilla, own, faasnap}
}

// Prepare on the fake VMM: boot, clean snapshot, the Warm strategy's real
// record phase (working set recorded with mincore, warm snapshot, loading
// set built), then the other steps on the warm snapshot; every record VM
// is gone afterwards.
func TestPrepare(t *testing.T) {
	ran, strategies := testStrategies(nil)
	s, _ := fakeService(t, func(c *Config) { c.Strategies = strategies })
	ctx := context.Background()
	createFn(t, s, "echo")
	res, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`{"x":1}`), GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	if res.Clean == nil || res.Warm == nil || res.Warm.Parent != res.Clean.ID {
		t.Fatalf("snapshots: clean %+v warm %+v", res.Clean, res.Warm)
	}
	if want := []string{"warm", "own on " + res.Warm.ID}; strings.Join(*ran, ",") != strings.Join(want, ",") {
		t.Errorf("steps ran %q, want %q", *ran, want)
	}
	var fs restore.FaaSnapBuild
	var rp restore.REAPBuild
	if !res.BuildAs("faasnap", &fs) || fs.WorkingSetPages == 0 || fs.GroupSize != 64 || fs.Scans == 0 ||
		!res.BuildAs("reap", &rp) || rp.FaultedPages != 7 || res.Prepared["faasnap"].RecordMS <= 0 {
		t.Errorf("builds: faasnap %+v reap %+v", fs, rp)
	}
	if res.Timing.WarmSnapshotMS <= 0 || res.Timing.TotalMS < res.Timing.BootMS {
		t.Errorf("timing %+v", res.Timing)
	}
	sn, err := s.GetSnapshot(ctx, res.Warm.ID)
	if err != nil {
		t.Fatal(err)
	}
	var stored PrepareResult
	if err := json.Unmarshal(sn.Prepared, &stored); err != nil || !stored.BuildAs("faasnap", &fs) || stored.Warm.ID != res.Warm.ID {
		t.Errorf("stored prepare result: %v %s", err, sn.Prepared)
	}
	// The warm snapshot restores with the strategy just prepared.
	cold, err := s.InvokeCold(ctx, ColdRequest{Snapshot: res.Warm.ID, Strategy: "faasnap", InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
	if err != nil || !cold.OK || cold.Strategy != "faasnap" {
		t.Fatalf("cold faasnap: %v %+v", err, cold)
	}
	noLiveVMs(t, s)
}

// A prepare that fails names the step and why, and leaves no VM behind.
func TestPrepareFailures(t *testing.T) {
	broken := errors.New("artifact writer broke")
	_, strategies := testStrategies(func(context.Context, restore.RecordHost, *restore.Prepare) error { return broken })
	s, _ := fakeService(t, func(c *Config) { c.Strategies = strategies })
	ctx := context.Background()
	createFn(t, s, "echo")
	for _, c := range []struct {
		event string
		want  string
	}{
		{`{"op":"raise"}`, "faasnap record: invalid request: record invocation raised ValueError: asked to"},
		{`{"x":1}`, "reap record: artifact writer broke"},
	} {
		_, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(c.event)})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("event %s: %v, want %q", c.event, err, c.want)
		}
		noLiveVMs(t, s)
	}
	// Without a strategy that takes the warm snapshot there is nothing to
	// prepare for.
	vanilla, _ := restore.Lookup(restore.Vanilla)
	s.strategies = []restore.Strategy{vanilla}
	s.prep = s.newPreparer() // the preparer keeps the strategies it was made with
	if _, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`1`)}); err == nil ||
		!strings.Contains(err.Error(), "warm snapshot") {
		t.Errorf("no warm strategy: %v", err)
	}
	if _, err := s.Prepare(ctx, PrepareRequest{Function: "echo", GroupSize: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad group size: %v", err)
	}
}

func noLiveVMs(t *testing.T, s *Service) {
	t.Helper()
	vms, err := s.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, vm := range vms {
		if vm.State == catalog.StateRunning || vm.State == catalog.StatePaused {
			t.Errorf("vm %s left %s", vm.ID, vm.State)
		}
	}
}

// failingSession is a strategy session that can no longer serve memory
// right after the VM resumed.
type failingSession struct {
	restore.Session
	failed chan error
}

func (f failingSession) Failed() <-chan error { return f.failed }

// A strategy that reports it can no longer serve the VM's memory gets the
// VM killed and marked failed (the guest would otherwise read zero pages).
func TestStrategyFailureKillsVM(t *testing.T) {
	vanilla, _ := restore.Lookup(restore.Vanilla)
	failed := make(chan error, 1)
	broken := restore.Strategy{Kind: restore.REAP, Begin: func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		sess, err := vanilla.Begin(ctx, snap, env)
		return failingSession{sess, failed}, err
	}}
	// No VMM pool: a standby session would share the failure channel.
	s, _ := fakeService(t, func(c *Config) { c.Strategies, c.VMMPool = []restore.Strategy{vanilla, broken}, -1 })
	ctx := context.Background()
	_, sn := bootAndSnapshot(t, s, "echo")
	vm, _, err := s.RestoreVM(ctx, sn.ID, "reap")
	if err != nil {
		t.Fatal(err)
	}
	failed <- errors.New("userfaultfd server stopped: bad address")
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.GetVM(ctx, vm.ID)
		if err == nil && got.State == catalog.StateFailed && strings.Contains(got.Reason, "bad address") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm after its strategy failed: %v %+v", err, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, _, err := s.RestoreVM(ctx, sn.ID, "premap"); !errors.Is(err, ErrInvalid) {
		t.Errorf("a strategy this daemon does not offer: %v", err)
	}
}

// A start over the host budget waits in the admission queue and runs when
// a VM stops; its wait is reported apart from set-up.
func TestColdStartWaitsForRoom(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.MaxVMs, c.AdmissionTimeout = 1, 10*time.Second })
	ctx := context.Background()
	booted, sn := bootAndSnapshot(t, s, "echo")
	go func() {
		time.Sleep(300 * time.Millisecond)
		s.DeleteVM(context.Background(), booted.ID)
	}()
	inv, err := s.InvokeCold(ctx, ColdRequest{Snapshot: sn.ID, InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
	if err != nil || !inv.OK {
		t.Fatalf("cold start after waiting: %v %+v", err, inv)
	}
	rt := inv.Timing.Restore
	if rt.AdmissionWaitMS < 200 || rt.SetupMS > rt.AdmissionWaitMS {
		t.Fatalf("waited %.0f ms, set-up %.0f ms: the wait must be reported and not be set-up", rt.AdmissionWaitMS, rt.SetupMS)
	}
	// A function at its own limit waits too; the daemon's budget is free.
	s2, _ := fakeService(t, func(c *Config) { c.AdmissionTimeout = 300 * time.Millisecond })
	archive := tarGz(t, tarEntry{name: "handler.py", body: "def handle(e): return e\n"})
	if _, err := s2.CreateFunction(ctx, FunctionSpec{Name: "one", Archive: bytes.NewReader(archive), MaxConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	vm, err := s2.BootVM(ctx, "one")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s2.BootVM(ctx, "one"); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "max_concurrency") {
		t.Fatalf("second VM of a function limited to one: %v", err)
	}
	if err := s2.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.BootVM(ctx, "one"); err != nil {
		t.Fatalf("after its VM was deleted: %v", err)
	}
	if _, err := s2.CreateFunction(ctx, FunctionSpec{Name: "bad", Archive: bytes.NewReader(archive), MaxConcurrency: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative max_concurrency: %v", err)
	}
}

// The keep-alive pool: the function's next invocation runs warm on the VM
// a cold one left; it expires, gives way to a start that needs room, and a
// function can opt out.
func TestKeepAlivePool(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.MaxVMs, c.KeepAlive, c.AdmissionTimeout = 2, 500*time.Millisecond, 5*time.Second })
	ctx := context.Background()
	booted, _ := bootAndSnapshot(t, s, "echo")
	if err := s.DeleteVM(ctx, booted.ID); err != nil {
		t.Fatal(err)
	}
	invoke := func(fn string) *Invocation {
		t.Helper()
		inv, err := s.InvokeCold(ctx, ColdRequest{Function: fn, InvokeRequest: InvokeRequest{Event: json.RawMessage(`"x"`)}})
		if err != nil || !inv.OK {
			t.Fatalf("invoke %s: %v %+v", fn, err, inv)
		}
		return inv
	}
	first, second := invoke("echo"), invoke("echo")
	if first.Mode != "cold" || second.Mode != "pooled" || second.VM != first.VM || second.Timing.Restore != nil {
		t.Fatalf("first %s on %s, second %s on %s", first.Mode, first.VM, second.Mode, second.VM)
	}
	if v, err := s.GetVM(ctx, first.VM); err != nil || v.State != "running" {
		t.Fatalf("kept vm: %+v %v", v, err)
	}
	// An explicit strategy is a restore, not the pool.
	if inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", Strategy: "vanilla", InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}}); err != nil || inv.Mode != "cold" {
		t.Fatalf("explicit strategy: %v %+v", err, inv)
	}
	// The keep-alive time over, the VM is stopped and forgotten.
	deadline := time.Now().Add(3 * time.Second)
	for {
		if _, err := s.GetVM(ctx, first.VM); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the idle vm outlived its keep-alive time")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Idle VMs give way: with both slots held (one idle, one booted), a
	// third start reclaims the idle one instead of waiting.
	kept := invoke("echo")
	other, _ := bootAndSnapshot(t, s, "other")
	third, err := s.BootVM(ctx, "other")
	if err != nil {
		t.Fatalf("start with an idle vm holding room: %v", err)
	}
	if _, err := s.GetVM(ctx, kept.VM); !errors.Is(err, ErrNotFound) {
		t.Errorf("the idle vm was not reclaimed: %v", err)
	}
	s.DeleteVM(ctx, other.ID)
	s.DeleteVM(ctx, third.ID)
	// A function that opts out starts every invocation from its snapshot.
	vm, _ := bootAndSnapshotSpec(t, s, FunctionSpec{Name: "fresh", KeepAliveS: -1})
	s.DeleteVM(ctx, vm.ID)
	if a, b := invoke("fresh"), invoke("fresh"); a.Mode != "cold" || b.Mode != "cold" || a.VM == b.VM {
		t.Fatalf("opted out: %s %s, %s %s", a.Mode, a.VM, b.Mode, b.VM)
	}
	// A refused delete names the idle VM and keeps it; a cascade stops it.
	k := invoke("echo")
	if err := s.DeleteFunction(ctx, "echo"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), k.VM+" kept idle") {
		t.Fatalf("delete a function whose vm is idle: %v", err)
	}
	if v, err := s.GetVM(ctx, k.VM); err != nil || v.State != catalog.StateRunning {
		t.Fatalf("a refused delete touched the idle vm: %+v %v", v, err)
	}
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); err != nil {
		t.Fatalf("cascade: %v", err)
	}
	if _, err := s.GetVM(ctx, k.VM); !errors.Is(err, ErrNotFound) {
		t.Errorf("idle vm of a deleted function: %v", err)
	}
}

// The invocation history keeps the newest HistoryMax records.
func TestHistoryIsPruned(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.HistoryMax = 3 })
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	for i := range history.PruneEvery {
		if inv, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(fmt.Sprint(i))}); err != nil || !inv.OK {
			t.Fatalf("invoke %d: %v", i, err)
		}
	}
	invs, err := s.ListInvocations(ctx, "echo", 1000, time.Time{}, "")
	if err != nil || len(invs) != 3 || string(invs[0].Detail) == "" {
		t.Fatalf("history after %d invocations: %d records %v", history.PruneEvery, len(invs), err)
	}
}

// Garbage collection keeps a function's newest SnapshotKeep snapshots,
// and those pinned or in use.
func TestSnapshotGarbageCollection(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.SnapshotKeep, c.KeepAlive = 2, -1 })
	ctx := context.Background()
	vm, first := bootAndSnapshot(t, s, "echo")
	if _, err := s.PinSnapshot(ctx, first.ID, true); err != nil {
		t.Fatal(err)
	}
	var made []string
	for range 3 {
		sn, err := s.CreateSnapshot(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		made = append(made, sn.ID)
	}
	// made[0] went when made[2] came; a VM restored from made[1] keeps it
	// while it lives.
	inUse, _, err := s.RestoreVM(ctx, made[1], "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	ids := func() []string { return snapshotIDs(t, s, "echo") }
	got := ids()
	// first (pinned), made[1] (in use), the newest two.
	if len(got) != 4 || got[0] != first.ID || got[1] != made[1] || got[2] != made[2] {
		t.Fatalf("snapshots %v (made %v, pinned %s)", got, made, first.ID)
	}
	if err := s.DeleteVM(ctx, inUse.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PinSnapshot(ctx, first.ID, false); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateSnapshot(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if got := ids(); len(got) != 2 {
		t.Fatalf("after unpinning and freeing: %v", got)
	}
	if _, err := s.PinSnapshot(ctx, "snap-000000000000", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pin of an unknown snapshot: %v", err)
	}
}

// Idle VMs are stopped, the longest idle first, while the host's available
// memory is below the floor; the pool counts hits, misses and evictions.
func TestKeepAliveGivesWayToMemoryPressure(t *testing.T) {
	var avail atomic.Int64
	avail.Store(1 << 20)
	oldRead, oldEvery := hostAvailable, pressureInterval
	hostAvailable = func() (int, bool) { return int(avail.Load()), true }
	pressureInterval = 20 * time.Millisecond
	t.Cleanup(func() { hostAvailable, pressureInterval = oldRead, oldEvery })

	s, _ := fakeService(t, func(c *Config) { c.KeepAliveMinAvailableMiB, c.KeepAliveMaxIdle = 1024, 4 })
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	if err := s.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	invoke := func() *Invocation {
		t.Helper()
		inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
		if err != nil || !inv.OK {
			t.Fatalf("invoke: %v %+v", err, inv)
		}
		return inv
	}
	// Two invocations at once leave two idle VMs.
	var wg sync.WaitGroup
	invs := make([]*Invocation, 2)
	for i := range invs {
		wg.Add(1)
		go func() { defer wg.Done(); invs[i] = invoke() }()
	}
	wg.Wait()
	if s.pool.Idle() != 2 {
		t.Fatalf("%d idle vms, want 2 (%s %s)", s.pool.Idle(), invs[0].Mode, invs[1].Mode)
	}
	time.Sleep(5 * pressureInterval)
	if s.pool.Idle() != 2 {
		t.Fatalf("idle vms stopped with memory to spare: %d left", s.pool.Idle())
	}
	// Memory runs low: the longest idle VM goes, then the other.
	var idle []string // one function's idle VMs, longest idle first
	s.pool.EachWhere(func(*kept) bool { return true }, func(k *kept) { idle = append(idle, k.Rec.ID) })
	oldest := idle[0]
	avail.Store(100)
	waitFor(t, 3*time.Second, "the longest idle vm stopped", func() bool {
		_, err := s.GetVM(ctx, oldest)
		return errors.Is(err, ErrNotFound)
	})
	waitFor(t, 3*time.Second, "every idle vm stopped", func() bool { return s.pool.Idle() == 0 })
	avail.Store(1 << 20)
	if inv := invoke(); inv.Mode != "cold" {
		t.Fatalf("after the pool was emptied: %s", inv.Mode)
	}
	if inv := invoke(); inv.Mode != "pooled" {
		t.Fatalf("with memory back: %s", inv.Mode)
	}
	got := promText(t, s)
	for _, want := range []string{
		`thaw_keepalive_evictions_total{reason="memory_pressure"} 2`,
		`thaw_keepalive_total{outcome="hit"} 1`,
		`thaw_keepalive_total{outcome="miss"} 3`,
		`thaw_keepalive_idle_vms 1`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
}

// waitFor polls cond until it holds or d has passed.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// promText is the daemon's metrics in the text exposition format.
func promText(t *testing.T, s *Service) string {
	t.Helper()
	mfs, err := s.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// Prepare with faasnap_variants builds the technique-off artifacts (the
// one without host page recording from the faulted pages another step
// recorded); cold invocations restore them by name; a variant of a
// strategy without variants, or on a warm invocation, is refused.
func TestPrepareVariants(t *testing.T) {
	_, strategies := testStrategies(func(_ context.Context, _ restore.RecordHost, p *restore.Prepare) error {
		p.Touched = []uint64{3, 1, 2}
		return nil
	})
	s, _ := fakeService(t, func(c *Config) { c.Strategies = strategies })
	ctx := context.Background()
	createFn(t, s, "echo")
	res, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`{"x":1}`), FaaSnapVariants: true})
	if err != nil {
		t.Fatal(err)
	}
	var built []string
	var fs restore.FaaSnapBuild
	res.BuildAs("faasnap", &fs)
	for _, v := range fs.Variants {
		built = append(built, v.Variant)
		if v.Variant == restore.VariantNoHostRecording && v.WorkingSetPages != 3 {
			t.Errorf("no-hostrec built from %d pages, want the 3 faulted", v.WorkingSetPages)
		}
	}
	if strings.Join(built, ",") != "no-freed,no-merge,no-hostrec" {
		t.Errorf("variants built %v", built)
	}
	for _, v := range restore.FaaSnapVariants {
		inv, err := s.InvokeCold(ctx, ColdRequest{Snapshot: res.Warm.ID, Strategy: "faasnap", Variant: v, InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}})
		if err != nil || !inv.OK || inv.Strategy != "faasnap" || inv.StrategyStats.PartValues()["variant"] != v {
			t.Fatalf("variant %s: %v %+v", v, err, inv)
		}
	}
	if _, err := s.InvokeCold(ctx, ColdRequest{Snapshot: res.Warm.ID, Strategy: "vanilla", Variant: "no-merge"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("vanilla with a variant: %v", err)
	}
	// Without a recording of the guest's faults, the variant cannot be built.
	_, strategies = testStrategies(func(context.Context, restore.RecordHost, *restore.Prepare) error { return nil })
	s.strategies = strategies
	s.prep = s.newPreparer()
	if _, err := s.Prepare(ctx, PrepareRequest{Function: "echo", FaaSnapVariants: true}); err == nil || !strings.Contains(err.Error(), "faulted pages") {
		t.Errorf("no faulted pages: %v", err)
	}
	noLiveVMs(t, s)
}
