package pool

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/metrics"
)

// readyFake is the daemon as the ready clones see it.
type readyFake struct {
	mu       sync.Mutex
	starts   int
	gate     chan struct{} // if set, each start waits for it
	fail     error
	dead     map[string]bool
	retired  map[string]string
	failed   map[string]string
	restores int64
	measured map[string]int // MiB each clone measures (absent: an error)
	listed   []string       // clones listed ready, in order
	admitted []int          // MiB each fill asked admission for
	closed   bool
	wg       sync.WaitGroup
}

func newReadyFake() *readyFake {
	return &readyFake{dead: map[string]bool{}, retired: map[string]string{}, failed: map[string]string{}}
}

var readyFn = &catalog.Function{Name: "f", MemoryMiB: 200}

func (f *readyFake) deps() ReadyDeps[*fakeVM] {
	return ReadyDeps[*fakeVM]{
		Start: func(_ context.Context, key Key, release func()) (*fakeVM, *catalog.VM, error) {
			f.mu.Lock()
			f.starts++
			id := fmt.Sprintf("%s-%d", key.Snapshot, f.starts)
			gate, fail := f.gate, f.fail
			f.mu.Unlock()
			if gate != nil {
				<-gate
			}
			if fail != nil {
				release()
				return nil, nil, fail
			}
			return &fakeVM{id}, &catalog.VM{ID: id, Strategy: string(key.Kind)}, nil
		},
		Function: func(_ context.Context, snapshot string) (*catalog.Function, error) {
			if snapshot == "gone" {
				return nil, fmt.Errorf("snapshot %s: %w", snapshot, errdefs.ErrNotFound)
			}
			return readyFn, nil
		},
		Listed: func(vm *fakeVM, pooled func() bool) {
			if pooled() {
				f.mu.Lock()
				f.listed = append(f.listed, vm.id)
				f.mu.Unlock()
			}
		},
		Retire: func(vm *fakeVM, _ *catalog.VM, why string) { f.mu.Lock(); f.retired[vm.id] = why; f.mu.Unlock() },
		Alive:  func(vm *fakeVM) bool { f.mu.Lock(); defer f.mu.Unlock(); return !f.dead[vm.id] },
		Fail: func(vm *fakeVM, why string) string {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.failed[vm.id] = why
			return "killed by signal 9"
		},
		Admit: func(_ string, mib, _ int) (func(), bool) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.admitted = append(f.admitted, mib)
			return func() {}, true
		},
		Restoring: func() int64 { f.mu.Lock(); defer f.mu.Unlock(); return f.restores },
		Measure: func(vm *fakeVM) (int, error) {
			f.mu.Lock()
			defer f.mu.Unlock()
			if mib, ok := f.measured[vm.id]; ok {
				return mib, nil
			}
			return 0, errors.New("no such process")
		},
		Go:          func(fn func()) bool { return goUnlessClosed(&f.mu, &f.closed, &f.wg, fn) },
		Closed:      func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.closed },
		Metrics:     metrics.New(func() metrics.State { return metrics.State{} }),
		Log:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		OverheadMiB: 56,
		BootTimeout: 3 * time.Second,
	}
}

// oldestClone is the id of r's clone that became ready first.
func oldestClone(r *Ready[*fakeVM]) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var oldest *Clone[*fakeVM]
	for _, list := range r.clones {
		for _, c := range list {
			if oldest == nil || c.since.Before(oldest.since) {
				oldest = c
			}
		}
	}
	if oldest == nil {
		return ""
	}
	return oldest.Rec.ID
}

func (f *readyFake) why(id string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.retired[id]
}

// setRestores sets how many restores the fake daemon says run.
func (f *readyFake) setRestores(n int64) {
	f.mu.Lock()
	f.restores = n
	f.mu.Unlock()
}

// stillStarts fails the test, saying why, unless 50 ms from now exactly
// n fills have started.
func (f *readyFake) stillStarts(t *testing.T, n int, why string) {
	t.Helper()
	time.Sleep(50 * time.Millisecond)
	if f.nStarts() != n {
		t.Fatal(why)
	}
}

func (f *readyFake) nStarts() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.starts
}

// newReadyPool runs a pool with MinReady 1 and budget for two clones.
func newReadyPool(t *testing.T, f *readyFake, edit func(*ReadyConfig)) *Ready[*fakeVM] {
	t.Helper()
	cfg := ReadyConfig{MemoryMiB: 2 * (200 + 56), MinReady: 1, Interval: 10 * time.Millisecond, Settle: -1}
	if edit != nil {
		edit(&cfg)
	}
	cfg.SetDefaults()
	if errs := cfg.Validate(); len(errs) > 0 {
		t.Fatal(errs)
	}
	r := NewReady(cfg, f.deps())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { r.Loop(stop); close(done) }()
	t.Cleanup(func() {
		close(stop)
		<-done
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		f.wg.Wait()
		r.Close()
	})
	return r
}

// A request's demand makes the loop fill a clone once the request is over;
// the next request takes it; a clone found dead is stopped as failed and
// the request is told why.
func TestReadyFillAndTake(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MaxPerKey = 1 }) // the fake's refills are too quick to size on
	key := ReadyKeyOf("s", "vanilla", false)
	tk := r.Begin(key)
	f.stillStarts(t, 0, "a fill started while a request that could restore was unserved")
	tk.End()
	waitUntil(t, "a ready clone", func() bool { return r.Count() == 1 })
	if st := r.State(); st.Clones != 1 || st.MemoryMiB != 256 {
		t.Fatalf("state %+v, want one clone of 256 MiB", st)
	}
	tk = r.Begin(key)
	rc, dead := r.Take(key)
	if rc == nil || dead != "" || rc.Rec.ID != "s-1" || rc.Key != key {
		t.Fatalf("took %+v (%q)", rc, dead)
	}
	done := r.Dispatch(tk)
	if r.Count() != 0 {
		t.Fatal("the taken clone is still counted")
	}
	f.stillStarts(t, 1, "a refill started while a request ran on a ready clone")
	done()
	tk.End()
	waitUntil(t, "the refill", func() bool { return r.Count() == 1 })
	f.mu.Lock()
	f.dead["s-2"] = true
	f.mu.Unlock()
	rc, dead = r.Take(key)
	if rc != nil || !strings.Contains(dead, "s-2 died while waiting: killed by signal 9") {
		t.Fatalf("took %+v, dead %q", rc, dead)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if why := f.failed["s-2"]; why != WhyReadyDied {
		t.Fatalf("the dead clone was stopped with %q", why)
	}
}

// Under auto a request takes a clone of any strategy of its snapshot.
func TestReadyAutoTakesAnyStrategy(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, nil)
	r.Begin(Key{Snapshot: "s", Kind: "reap"}).End()
	waitUntil(t, "a reap clone", func() bool { return r.Count() == 1 })
	if rc, _ := r.Take(ReadyKeyOf("t", "vanilla", true)); rc != nil {
		t.Fatal("took another snapshot's clone")
	}
	rc, _ := r.Take(ReadyKeyOf("s", "vanilla", true))
	if rc == nil || rc.Key.Kind != "reap" {
		t.Fatalf("auto took %+v, want the reap clone", rc)
	}
	if keys := r.DemandKeys(); len(keys) != 1 || keys[0] != (Key{Snapshot: "s", Kind: "reap"}) {
		t.Fatalf("demand keys %v", keys)
	}
}

// A failed fill waits readyRetry before the key's next; a key whose
// snapshot is gone is forgotten; no fill runs while restores outnumber
// the fills.
func TestReadyFailedFillBacksOff(t *testing.T) {
	old := readyRetry
	readyRetry = 500 * time.Millisecond
	t.Cleanup(func() { readyRetry = old })
	f := newReadyFake()
	f.fail = errors.New("no vmm")
	r := newReadyPool(t, f, nil)
	r.Begin(Key{Snapshot: "s", Kind: "vanilla"}).End()
	r.Begin(Key{Snapshot: "gone", Kind: "vanilla"}).End()
	waitUntil(t, "a fill", func() bool { return f.nStarts() == 1 })
	time.Sleep(100 * time.Millisecond)
	if n := f.nStarts(); n != 1 {
		t.Fatalf("%d fills within the retry time", n)
	}
	waitUntil(t, "the retry", func() bool { return f.nStarts() == 2 })
	f.mu.Lock()
	f.fail, f.restores = nil, 1
	f.mu.Unlock()
	time.Sleep(800 * time.Millisecond) // past the retry time
	if n := f.nStarts(); n != 2 {
		t.Fatalf("%d fills while a restore ran", n)
	}
	f.setRestores(0)
	waitUntil(t, "a clone", func() bool { return r.Count() == 1 })
	if keys := r.DemandKeys(); len(keys) != 1 || keys[0].Snapshot != "s" {
		t.Fatalf("demand keys %v, want the gone snapshot's forgotten", keys)
	}
}

// Dropping a snapshot's clones retires the ready ones and a fill under way
// (once started), waiting for it; held, it gets no fill; Reclaim takes the
// oldest; Forget drops one without stopping it.
func TestReadyDropHoldReclaim(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MinReady = 2; c.Fills = 2 })
	key := Key{Snapshot: "s", Kind: "vanilla"}
	r.Begin(key).End()
	waitUntil(t, "two clones", func() bool { return r.Count() == 2 })
	oldest := oldestClone(r) // two fills ran at once: either may have become ready first
	f.mu.Lock()
	f.gate = make(chan struct{}) // before the reclaim: its refill may start at once
	f.mu.Unlock()
	if !r.Reclaim(WhyReadyRoom) || f.why(oldest) != WhyReadyRoom {
		t.Fatalf("reclaim retired %v, want %s (the oldest) for room", f.retired, oldest)
	}
	waitUntil(t, "a refill under way", func() bool { return r.Filling() == 1 })
	time.AfterFunc(50*time.Millisecond, func() { f.mu.Lock(); close(f.gate); f.gate = nil; f.mu.Unlock() })
	r.Hold("s", true)
	r.DropSnapshot("s", WhyReadyEvicted)
	f.mu.Lock()
	retired := len(f.retired)
	f.mu.Unlock()
	if r.Count() != 0 || r.Filling() != 0 || retired != 3 || len(r.DemandKeys()) != 0 {
		t.Fatalf("after the drop: %d ready, %d filling, %d retired", r.Count(), r.Filling(), retired)
	}
	r.Begin(key).End()
	time.Sleep(50 * time.Millisecond)
	if r.Filling() != 0 || r.Count() != 0 {
		t.Fatal("a held snapshot got a fill")
	}
	r.Hold("s", false)
	waitUntil(t, "clones again", func() bool { return r.Count() == 2 })
	r.Forget("s-4")
	if r.Count() != 1 || f.why("s-4") != "" {
		t.Fatalf("forget: %d ready, s-4 retired %q", r.Count(), f.why("s-4"))
	}
}

// A ready clone counts what it measured once ready, not guest RAM plus
// overhead: the budget of two clones' bound holds more of them once the
// first is measured, a clone not measured counts the most its key's
// latest measured, and the state a scrape reads sums what each counts.
func TestReadyCountsMeasuredMemory(t *testing.T) {
	f := newReadyFake()
	f.measured = map[string]int{"s-1": 100, "s-2": 60, "s-3": 60, "s-4": 60}
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MinReady = 5; c.MaxPerKey = 5 })
	key := Key{Snapshot: "s", Kind: "vanilla"}
	r.Begin(key).End()
	// 512 MiB: the first fill reserves 256 (the bound), then each
	// reserves the estimate (100) and counts what it measured.
	waitUntil(t, "clones within the budget", func() bool { return r.Count() == 5 })
	if st := r.State(); st.MemoryMiB != 100+60+60+60+100 {
		t.Fatalf("state %+v: want 100+60+60+60 measured and 100 for s-5, not measured", st)
	}
	time.Sleep(50 * time.Millisecond)
	if f.nStarts() != 5 {
		t.Fatalf("%d starts: want 5, the cap", f.nStarts())
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, mib := range f.admitted { // admission reserves the full room
		if mib != 200+56 {
			t.Fatalf("fills asked admission for %v MiB, want 256 each", f.admitted)
		}
	}
}

// A VM listing shows on each clone waiting in the pool, listed ready, the
// MiB it counts (what the state a scrape reads sums), and nothing on a VM
// the pool does not hold, on one not listed ready, nor on a clone taken.
func TestReadyMarksCountedMemory(t *testing.T) {
	f := newReadyFake()
	f.measured = map[string]int{"s-1": 100, "s-2": 60}
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MinReady = 2; c.MaxPerKey = 2 })
	key := Key{Snapshot: "s", Kind: "vanilla"}
	r.Begin(key).End()
	waitUntil(t, "two clones", func() bool { return r.Count() == 2 })
	vms := []*catalog.VM{{ID: "s-1", State: catalog.StateReady}, {ID: "s-2", State: catalog.StateReady},
		{ID: "s-2", State: catalog.StateRunning}, {ID: "other", State: catalog.StateReady}}
	r.MarkMemory(vms...)
	var got []int
	for _, v := range vms {
		got = append(got, v.ReadyMiB)
	}
	if want := []int{100, 60, 0, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("marked %v, want %v", got, want)
	}
	if st := r.State(); st.MemoryMiB != 160 {
		t.Fatalf("state %+v: want the 160 MiB marked", st)
	}
	rc, _ := r.Take(key)
	if rc == nil || rc.Rec.ID != "s-1" {
		t.Fatalf("took %v, want s-1", rc)
	}
	taken := &catalog.VM{ID: "s-1", State: catalog.StateReady} // listed before the take reached the catalog
	r.MarkMemory(taken)
	if taken.ReadyMiB != 0 {
		t.Fatalf("a taken clone marked %d MiB", taken.ReadyMiB)
	}
}

// The time from a take to its replacement ready is the key's refill time;
// a request on a clone holds fills back for Hold only, not its length.
func TestReadyRefillTimeAndHold(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MaxPerKey = 1; c.Hold = 100 * time.Millisecond })
	key := Key{Snapshot: "s", Kind: "vanilla"}
	r.Begin(key).End()
	waitUntil(t, "a clone", func() bool { return r.Count() == 1 })
	tk := r.Begin(key)
	rc, _ := r.Take(key)
	if rc == nil {
		t.Fatal("no clone taken")
	}
	t0 := time.Now()
	done := r.Dispatch(tk)
	defer func() { done(); tk.End() }()
	f.stillStarts(t, 1, "a refill started within the hold")
	waitUntil(t, "the refill while the request runs", func() bool { return r.Count() == 1 })
	took := time.Since(t0)
	r.mu.Lock()
	refill := r.demand[key].RefillTime()
	r.mu.Unlock()
	// The first fill replaced no clone; the second, from the take to
	// ready, is the first refill time measured.
	if refill < 100*time.Millisecond || refill > took {
		t.Fatalf("refill time %s: want from the 100 ms hold to %s", refill, took)
	}
}

// A request that found no clone holds fills back until it says so
// (Missed), not until it ends; its restore is then counted as restores are.
func TestReadyMissHoldsFillsUntilMissed(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, nil)
	key := Key{Snapshot: "s", Kind: "vanilla"}
	tk := r.Begin(key)
	defer tk.End()
	if rc, _ := r.Take(key); rc != nil {
		t.Fatal("a clone before any fill")
	}
	f.stillStarts(t, 0, "a fill started while the request had not said it missed")
	f.setRestores(1)
	tk.Missed()
	f.stillStarts(t, 0, "a fill started while the request restored")
	f.setRestores(0)
	waitUntil(t, "a fill while the missed request still runs", func() bool { return r.Count() == 1 })
}

// A fill under way does not make a ready clone surplus when the want drops
// (a request may be about to take it): the fill's clone, once ready, is
// the surplus then, and the older clone is the one stopped.
func TestReadyFillUnderWayKeepsReadyClone(t *testing.T) {
	f := newReadyFake()
	r := newReadyPool(t, f, func(c *ReadyConfig) { c.MaxPerKey = 2; c.Window = 300 * time.Millisecond })
	key := Key{Snapshot: "s", Kind: "vanilla"}
	r.Begin(key).End()
	r.Begin(key).End() // two arrivals within a refill time: two clones wanted
	waitUntil(t, "two clones", func() bool { return r.Count() == 2 })
	f.mu.Lock()
	f.gate = make(chan struct{})
	f.mu.Unlock()
	tk := r.Begin(key)
	if rc, _ := r.Take(key); rc == nil {
		t.Fatal("no clone taken")
	}
	r.Dispatch(tk)()
	tk.End()
	waitUntil(t, "a refill under way", func() bool { return r.Filling() == 1 })
	time.Sleep(500 * time.Millisecond) // the window empties: one clone (the minimum) wanted
	if n := r.Count(); n != 1 {
		t.Fatalf("%d ready clones while a fill was under way, want the one kept (retired %v)", n, f.retired)
	}
	survivor := oldestClone(r)
	f.mu.Lock()
	close(f.gate)
	f.gate = nil
	f.mu.Unlock()
	waitUntil(t, "the surplus stopped", func() bool { return f.why(survivor) == WhyReadySurplus })
	waitUntil(t, "one clone", func() bool { return r.Count() == 1 })
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.listed) != 3 || f.listed[0] != "s-1" {
		t.Fatalf("listed ready %v, want the three clones as each was pooled", f.listed)
	}
}
