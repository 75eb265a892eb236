package readyclones

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func policy(min, max int) Policy {
	return Policy{Window: 20 * time.Second, HitShare: 0.95, Refill: time.Second, MinReady: min, Max: max}
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	for name, p := range map[string]Policy{
		"no window":    {Refill: time.Second, HitShare: 0.9},
		"no refill":    {Window: time.Second, HitShare: 0.9},
		"share 0":      {Window: time.Second, Refill: time.Second},
		"share > 1":    {Window: time.Second, Refill: time.Second, HitShare: 1.5},
		"min > max":    {Window: time.Second, Refill: time.Second, HitShare: 0.9, MinReady: 3, Max: 2},
		"negative min": {Window: time.Second, Refill: time.Second, HitShare: 0.9, MinReady: -1},
	} {
		if err := p.Validate(); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: %v, want ErrPolicy", name, err)
		}
	}
	// Every problem at once.
	err := Policy{HitShare: 2, MinReady: -1}.Validate()
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Errorf("%d problems reported, want 3: %v", n, err)
	}
}

// A function with no traffic wants its minimum; one request in the window
// makes it want one clone; the window passing decays it.
func TestWantIdleAndSporadic(t *testing.T) {
	d := NewDemand(policy(0, 0))
	if k := d.Want(at(0)); k != 0 {
		t.Fatalf("no traffic: want %d, expected 0", k)
	}
	d.Begin(at(1))
	d.End(at(1.01))
	if k := d.Want(at(2)); k != 1 {
		t.Fatalf("one request in the window: want %d, expected 1", k)
	}
	if d.Idle(at(2)) {
		t.Fatal("idle with a request in the window")
	}
	if k := d.Want(at(22)); k != 0 {
		t.Fatalf("after the window: want %d, expected 0", k)
	}
	if !d.Idle(at(22)) {
		t.Fatal("not idle after the window")
	}
	m := NewDemand(policy(2, 0))
	if k := m.Want(at(100)); k != 2 {
		t.Fatalf("min ready 2, no traffic: want %d", k)
	}
}

// The clones wanted follow arrivals within one refill time, not how long
// requests last: one arrival every 0.5 s wants 2 clones with a 1 s refill
// whether each request lasts 10 ms or 5 s, and 4 with a 2 s refill.
func TestWantFollowsRefillNotLength(t *testing.T) {
	for _, length := range []float64{0.01, 5} {
		d := NewDemand(policy(0, 0))
		for i := range 30 {
			s := 0.5 * float64(i)
			d.Begin(at(s))
			d.End(at(s + length))
		}
		if k := d.Want(at(15)); k != 2 {
			t.Errorf("length %v s, refill 1 s: want %d, expected 2", length, k)
		}
		d.Refilled(2 * time.Second)
		if k := d.Want(at(15)); k != 4 {
			t.Errorf("length %v s, refill 2 s measured: want %d, expected 4", length, k)
		}
	}
}

// A burst counts for the share of the window's requests it holds: 16
// requests a second apart (each alone within a refill time) and a burst of
// 4 make 20, whose counts are 1 (17 times), 2, 3 and 4.
func TestWantBursts(t *testing.T) {
	for _, tc := range []struct {
		share float64
		want  int
	}{{1, 4}, {0.95, 3}, {0.9, 2}, {0.85, 1}} {
		p := policy(0, 0)
		p.HitShare = tc.share
		d := NewDemand(p)
		for i := range 16 {
			d.Begin(at(float64(i)))
			d.End(at(float64(i) + 0.1))
		}
		for range 4 {
			d.Begin(at(17))
		}
		if k := d.Want(at(17)); k != tc.want {
			t.Errorf("share %v: want %d, expected %d", tc.share, k, tc.want)
		}
	}
	c := NewDemand(policy(0, 3))
	for range 8 {
		c.Begin(at(1))
	}
	if k := c.Want(at(6)); k != 3 {
		t.Fatalf("capped at 3: want %d", k)
	}
}

// Requests in flight keep at least one clone even once their arrivals
// left the window; an end without a begin does not go negative.
func TestWantLongRequests(t *testing.T) {
	d := NewDemand(policy(0, 0))
	d.Begin(at(0.5))
	if k := d.Want(at(30)); k != 1 || d.InFlight() != 1 {
		t.Fatalf("a request in flight for 30 s: want %d (in flight %d), expected 1", k, d.InFlight())
	}
	d.End(at(30))
	d.End(at(31))
	if d.InFlight() != 0 {
		t.Fatal("in flight below zero")
	}
	if k := d.Want(at(31)); k != 0 {
		t.Fatalf("a window later: want %d", k)
	}
}

// The refill estimate starts at the policy's and moves toward those
// measured; a non-positive measurement is ignored.
func TestRefillEstimate(t *testing.T) {
	d := NewDemand(policy(0, 0))
	if d.RefillTime() != time.Second {
		t.Fatalf("before any: %s", d.RefillTime())
	}
	d.Refilled(0)
	if d.RefillTime() != time.Second {
		t.Fatalf("a zero measurement counted: %s", d.RefillTime())
	}
	d.Refilled(400 * time.Millisecond)
	if d.RefillTime() != 400*time.Millisecond {
		t.Fatalf("the first measured replaces the policy's: %s", d.RefillTime())
	}
	d.Refilled(800 * time.Millisecond)
	if d.RefillTime() != 500*time.Millisecond {
		t.Fatalf("a quarter of the way to 800 ms: %s", d.RefillTime())
	}
}

// The window's memory is bounded.
func TestArrivalsBounded(t *testing.T) {
	d := NewDemand(policy(0, 0))
	for i := range maxArrivals + 100 {
		d.Begin(at(float64(i) * 0.001))
	}
	if len(d.arrivals) != maxArrivals {
		t.Fatalf("%d arrivals kept", len(d.arrivals))
	}
}

// A clone's cost is the bound until one is measured, then the largest of
// the latest measurements.
func TestCost(t *testing.T) {
	c := NewCost(640)
	if c.Estimate() != 640 || c.Learned() {
		t.Fatalf("before any: %d", c.Estimate())
	}
	c.Measured(0)
	if c.Learned() {
		t.Fatal("a zero measurement counted")
	}
	c.Measured(77)
	c.Measured(38)
	if c.Estimate() != 77 || !c.Learned() {
		t.Fatalf("after 77 and 38: %d", c.Estimate())
	}
	for range costKept {
		c.Measured(40)
	}
	if c.Estimate() != 40 {
		t.Fatalf("77 left the latest %d: %d", costKept, c.Estimate())
	}
}

func TestAllocate(t *testing.T) {
	wants := []Want[string]{
		{Key: "a", Clones: 4, Min: 0, MemMiB: 100},
		{Key: "b", Clones: 1, Min: 1, MemMiB: 300},
		{Key: "c", Clones: 3, Min: 0, MemMiB: 100},
	}
	for _, tc := range []struct {
		budget  int
		a, b, c int
	}{
		{0, 0, 0, 0},
		{300, 0, 1, 0},  // the minimum first
		{500, 1, 1, 1},  // then round robin
		{650, 2, 1, 1},  // what does not fit is skipped
		{1000, 4, 1, 3}, // every want met
		{5000, 4, 1, 3}, // never more than wanted
		{250, 1, 0, 1},  // b's minimum does not fit; the others still get theirs
	} {
		got := Allocate(wants, tc.budget)
		if got["a"] != tc.a || got["b"] != tc.b || got["c"] != tc.c {
			t.Errorf("budget %d: %v, want a=%d b=%d c=%d", tc.budget, got, tc.a, tc.b, tc.c)
		}
		used := got["a"]*100 + got["b"]*300 + got["c"]*100
		if used > tc.budget {
			t.Errorf("budget %d: %d MiB allocated", tc.budget, used)
		}
	}
}
