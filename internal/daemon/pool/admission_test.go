package pool

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
)

func TestAdmissionBudgetQueueAndTimeout(t *testing.T) {
	a := NewAdmission(2, 1000, 2, 200*time.Millisecond)
	ctx := context.Background()
	r1, err := a.Acquire(ctx, "f", 400, 0)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Acquire(ctx, "g", 400, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Both slots taken: the next waits, then gets the first freed one.
	got := make(chan error, 1)
	go func() {
		r, err := a.Acquire(ctx, "h", 400, 0)
		if err == nil {
			defer r()
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if a.Queued() != 1 {
		t.Fatalf("queue depth %d, want 1", a.Queued())
	}
	r1()
	r1() // releasing twice gives back nothing more
	if err := <-got; err != nil {
		t.Fatalf("queued start: %v", err)
	}
	// Nothing freed in time: the wait ends in errdefs.ErrTooMany.
	r3, err := a.Acquire(ctx, "f", 400, 0)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := a.Acquire(ctx, "f", 400, 0); !errors.Is(err, errdefs.ErrTooMany) || time.Since(start) < 150*time.Millisecond {
		t.Fatalf("timed-out start: %v after %s", err, time.Since(start))
	}
	r2()
	r3()
	// More memory than the whole budget is a bad request, not a wait.
	if _, err := a.Acquire(ctx, "big", 2000, 0); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("oversized start: %v", err)
	}
	if a.vms != 0 || a.mem != 0 || len(a.perFn) != 0 {
		t.Fatalf("room not given back: %d VMs, %d MiB, %v", a.vms, a.mem, a.perFn)
	}
}

func TestAdmissionQueueFullAndMemoryBudget(t *testing.T) {
	a := NewAdmission(10, 1000, 1, time.Second)
	ctx := context.Background()
	r1, _ := a.Acquire(ctx, "f", 800, 0) // memory, not the VM count, is the limit
	done := make(chan error, 1)
	go func() { _, err := a.Acquire(ctx, "g", 300, 0); done <- err }()
	time.Sleep(50 * time.Millisecond)
	if _, err := a.Acquire(ctx, "h", 300, 0); !errors.Is(err, errdefs.ErrTooMany) {
		t.Fatalf("start over a full queue: %v", err)
	}
	r1()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A function at its own limit waits; other functions pass it.
func TestAdmissionPerFunctionLimit(t *testing.T) {
	a := NewAdmission(10, 10000, 8, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	r1, _ := a.Acquire(ctx, "f", 100, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	var ferr error
	go func() { defer wg.Done(); _, ferr = a.Acquire(ctx, "f", 100, 1) }()
	time.Sleep(50 * time.Millisecond)
	rg, err := a.Acquire(ctx, "g", 100, 1)
	if err != nil {
		t.Fatalf("another function waited behind f: %v", err)
	}
	rg()
	cancel()
	wg.Wait()
	if !errors.Is(ferr, context.Canceled) {
		t.Fatalf("f's second start: %v, want canceled while f runs its limit", ferr)
	}
	r1()
	if a.Queued() != 0 || a.vms != 0 {
		t.Fatalf("depth %d, vms %d", a.Queued(), a.vms)
	}
}
