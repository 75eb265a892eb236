package readyclones

import (
	"errors"
	"testing"
	"time"
)

var t0 = time.Unix(1_800_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func policy(min, max int) Policy {
	p := Policy{Window: 20 * time.Second, Bucket: time.Second, Quantile: 0.95, MinReady: min, Max: max}
	return p
}

func TestPolicyValidate(t *testing.T) {
	if err := DefaultPolicy().Validate(); err != nil {
		t.Fatalf("default policy: %v", err)
	}
	for name, p := range map[string]Policy{
		"no bucket":       {Window: time.Second, Quantile: 0.9},
		"window < bucket": {Window: time.Second, Bucket: 2 * time.Second, Quantile: 0.9},
		"too many":        {Window: time.Hour, Bucket: time.Millisecond, Quantile: 0.9},
		"quantile 0":      {Window: time.Second, Bucket: time.Second},
		"quantile > 1":    {Window: time.Second, Bucket: time.Second, Quantile: 1.5},
		"min > max":       {Window: time.Second, Bucket: time.Second, Quantile: 0.9, MinReady: 3, Max: 2},
		"negative min":    {Window: time.Second, Bucket: time.Second, Quantile: 0.9, MinReady: -1},
	} {
		if err := p.Validate(); !errors.Is(err, ErrPolicy) {
			t.Errorf("%s: %v, want ErrPolicy", name, err)
		}
	}
	// Every problem at once.
	err := Policy{Quantile: 2, MinReady: -1}.Validate()
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 3 {
		t.Errorf("%d problems reported, want 3: %v", n, err)
	}
}

// A function with no traffic wants its minimum; one request in the window
// makes it want one clone.
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
	// The window passes: decay to zero.
	if k := d.Want(at(22)); k != 0 {
		t.Fatalf("after the window: want %d, expected 0", k)
	}
	if !d.Idle(at(22)) {
		t.Fatal("not idle after the window")
	}
	// With a minimum, never below it.
	m := NewDemand(policy(2, 0))
	if k := m.Want(at(100)); k != 2 {
		t.Fatalf("min ready 2, no traffic: want %d", k)
	}
}

// Sustained concurrency of 4 with one burst of 12: p95 over 20 buckets
// ignores the single burst bucket, and the cap bounds the want.
func TestWantP95(t *testing.T) {
	d := NewDemand(policy(0, 0))
	for s := 0; s < 20; s++ {
		n := 4
		if s == 10 {
			n = 12
		}
		for range n {
			d.Begin(at(float64(s) + 0.1))
		}
		for range n {
			d.End(at(float64(s) + 0.5))
		}
	}
	if k := d.Want(at(19.9)); k != 4 {
		t.Fatalf("p95 of 19 buckets at 4 and one at 12: want %d, expected 4", k)
	}
	// Two burst buckets of 20 are 10% of the window: p95 sees them.
	for _, s := range []float64{20, 21} {
		for range 12 {
			d.Begin(at(s + 0.1))
		}
		for range 12 {
			d.End(at(s + 0.2))
		}
	}
	if k := d.Want(at(21.9)); k != 12 {
		t.Fatalf("bursts in 10%% of the buckets: want %d, expected 12", k)
	}
	c := NewDemand(policy(0, 3))
	for range 8 {
		c.Begin(at(1))
	}
	if k := c.Want(at(6)); k != 3 { // 8 in flight for 5 s of the 20
		t.Fatalf("capped at 3: want %d", k)
	}
}

// Requests in flight across buckets count in every bucket they span, even
// buckets with no begin or end of their own.
func TestWantLongRequests(t *testing.T) {
	d := NewDemand(policy(0, 0))
	for range 3 {
		d.Begin(at(0.5))
	}
	if k := d.Want(at(15)); k != 3 {
		t.Fatalf("3 requests in flight for 15 s: want %d, expected 3", k)
	}
	if d.InFlight() != 3 {
		t.Fatalf("in flight %d", d.InFlight())
	}
	for range 3 {
		d.End(at(15))
	}
	if d.InFlight() != 0 {
		t.Fatalf("in flight %d after they ended", d.InFlight())
	}
	// Once they ended, the buckets they spanned still count: 15 s of 20.
	if k := d.Want(at(16)); k != 3 {
		t.Fatalf("after 3 requests of 15 s ended: want %d, expected 3", k)
	}
	// An end without a begin (a record lost) does not go negative.
	d.End(at(16))
	if d.InFlight() != 0 {
		t.Fatal("in flight below zero")
	}
	if k := d.Want(at(40)); k != 0 {
		t.Fatalf("a window later: want %d", k)
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
