package fresh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/wire"
)

// A hit that outlasts the refill: two clones taken at 0, replaced at 0.5
// and 1.2 s, the burst answered at 2 s. A wait begun at the burst's end
// finds the pool full and reads 0; the refill is 1.2 s, from the takes to
// the first listing of two ready clones neither of which was taken.
func TestRefilledAtOutlastingHit(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	taken := map[string]bool{"a": true, "b": true}
	polls := []readyPoll{
		{at: at(-20), ids: []string{"a", "b"}},       // before the takes
		{at: at(30), ids: []string{"a", "b"}},        // answered after the takes, listed before them
		{at: at(100), ids: nil},                      // both taken
		{at: at(500), ids: []string{"c"}},            // one replaced
		{at: at(800), ids: []string{"b", "c"}},       // a listing that still shows b predates its take
		{at: at(1200), ids: []string{"c", "d"}},      // full again
		{at: at(2000), ids: []string{"c", "d"}},      // the burst's end
		{at: at(2050), ids: []string{"c", "d", "e"}}, // more than n
	}
	got, ok := refilledAt(polls, taken, 2, t0)
	if !ok || got.Sub(t0) != 1200*time.Millisecond {
		t.Fatalf("refilled at %v (%v), want 1.2 s after the takes", got.Sub(t0), ok)
	}
	if end, ok := refilledAt(polls[6:], taken, 2, at(2000)); !ok || end.Sub(at(2000)) != 0 {
		t.Fatalf("from the burst's end: %v (%v), the 0 s the column read", end.Sub(at(2000)), ok)
	}
	if _, ok := refilledAt(polls[:5], taken, 2, t0); ok {
		t.Fatal("refilled before two clones neither taken were listed")
	}
	other := []readyPoll{{at: at(-10), ids: []string{"x", "y"}}, {at: at(40), ids: []string{"x", "y"}}}
	if got, ok := refilledAt(other, taken, 2, t0); !ok || !got.Equal(at(40)) {
		t.Fatalf("clones the burst did not take: refilled at %v (%v), want the first listing after the takes", got.Sub(t0), ok)
	}
}

// The takes are the hits' clones; the first is its request sent plus the
// daemon's take_ms; a miss took none.
func TestTakesOf(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	hit := func(vm string, sentMS int, takeMS float64) sentCall {
		return sentCall{at: t0.Add(time.Duration(sentMS) * time.Millisecond),
			inv: &client.Invocation{VM: vm, Mode: "ready", Timing: wire.Timing{Ready: &wire.ReadyNote{Hit: true, TakeMS: takeMS}}}}
	}
	calls := []sentCall{hit("a", 0, 30), hit("b", 2, 5), {at: t0, inv: &client.Invocation{VM: "cold", Mode: "cold"}}}
	taken, first := takesOf(calls)
	if len(taken) != 2 || !taken["a"] || !taken["b"] || taken["cold"] {
		t.Fatalf("taken %v, want a and b", taken)
	}
	if first.Sub(t0) != 7*time.Millisecond {
		t.Fatalf("first take %v after the first request, want 7ms (b: sent at 2 ms, in hand 5 ms later)", first.Sub(t0))
	}
}

// fakePool is a daemon's ready clones seen through the API: a request
// takes the oldest, a replacement is ready refill later, and the request
// is answered hit later.
type fakePool struct {
	mu          sync.Mutex
	ready       []wire.VM
	made        int
	refill, hit time.Duration
}

func (f *fakePool) add() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.made++
	f.ready = append(f.ready, wire.VM{ID: fmt.Sprintf("vm-%012d", f.made), Function: "fresh-hello", State: "ready",
		MemoryMiB: 256, ReadyMemoryMiB: 30 + f.made})
}

func (f *fakePool) serve(w http.ResponseWriter, r *http.Request) {
	var body any
	switch {
	case r.Method == "GET" && r.URL.Path == "/v1/vms":
		f.mu.Lock()
		body = wire.List[wire.VM]{Items: append([]wire.VM{}, f.ready...)}
		f.mu.Unlock()
	case r.Method == "GET" && strings.HasSuffix(r.URL.Path, "/memory"):
		body = wire.VMMemory{VM: strings.Split(r.URL.Path, "/")[3], ProcessMemory: wire.ProcessMemory{RSSBytes: 70 << 20, PSSBytes: 33 << 20}}
	case r.Method == "POST" && r.URL.Path == "/v1/functions/fresh-hello/invoke":
		start := time.Now()
		inv := wire.Invocation{ID: "inv-1", Function: "fresh-hello", Mode: "cold", OK: true}
		f.mu.Lock()
		if len(f.ready) > 0 {
			inv.VM, inv.Mode, f.ready = f.ready[0].ID, "ready", f.ready[1:]
			inv.Timing.Ready = &wire.ReadyNote{Hit: true, TakeMS: ms(time.Since(start))}
			time.AfterFunc(f.refill, f.add)
		}
		f.mu.Unlock()
		time.Sleep(f.hit)
		body = inv
	default:
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(body)
}

// A burst of hits that last 1 s, each clone replaced 300 ms after its
// take: the refill recorded is the replacement's time, not the 0 s a wait
// begun at the burst's end reads; the last round's memory carries what the
// daemon counts each clone.
func TestHitRoundTimesRefillFromTakes(t *testing.T) {
	f := &fakePool{refill: 300 * time.Millisecond, hit: time.Second}
	f.add()
	f.add()
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	r := &run{c: client.New(srv.URL), cfg: Config{Rounds: 1, ReadyWait: 20 * time.Second}, res: &Result{}}
	r.cfg.defaults()
	s := &subject{fc: bench.FunctionCase{Name: "hello"}, name: "fresh-hello"}
	if err := r.hitRound(context.Background(), s, 2, 0); err != nil {
		t.Fatal(err)
	}
	if len(r.res.Refills) != 1 {
		t.Fatalf("refills %+v, want one", r.res.Refills)
	}
	if got := r.res.Refills[0]; got.Concurrency != 2 || got.MS < 300 || got.MS >= 1000 {
		t.Fatalf("refill %+v: want 300 ms or more (the replacements' time) and less than the 1 s hit", got)
	}
	if len(r.res.Memory) != 2 || r.res.Memory[0].CountedMiB != 31 || r.res.Memory[1].CountedMiB != 32 || r.res.Memory[0].PSSMiB != 33 {
		t.Fatalf("memory %+v: want the listing's 31 and 32 MiB counted, 33 MiB PSS", r.res.Memory)
	}
	if n := len(r.res.Samples); n != 2 || r.res.Samples[0].Served != "ready" {
		t.Fatalf("samples %+v: want the burst's two hits", r.res.Samples)
	}
}

// The report's memory table gives the daemon's counted MiB (their mean)
// and the refill from the takes; "-" where the daemon gave no figure.
func TestMemoryReport(t *testing.T) {
	res := &Result{Functions: []string{"hello", "old"}, Concurrency: []int{4}, Rounds: 1,
		Memory: []CloneMemory{{Function: "hello", CountedMiB: 31, PSSMiB: 30.2}, {Function: "hello", CountedMiB: 35, PSSMiB: 34.1},
			{Function: "old", PSSMiB: 40}},
		Refills: []Refill{{Function: "hello", Concurrency: 4, MS: 1200}, {Function: "hello", Concurrency: 4, MS: 1600}},
		Traces: []TraceResult{{Function: "hello", TraceSummary: TraceSummary{MeanReady: 2, MeanReadyMiB: 66}},
			{Function: "old", TraceSummary: TraceSummary{MeanReady: 2}}}}
	md := res.Markdown()
	for _, want := range []string{"| hello | 2 | 33 | 0 | 32 | 0 | 4: 1.40 s (2.86/s) |", "| old | 1 | - | 0 | 40 | 0 |  |",
		"counted against --standby-memory", "| 2.00 | 66 |", "| 2.00 | - |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
