// Package pool holds what the daemon keeps ahead of requests, and what
// decides whether a VM may start at all: admission (the host's budget),
// the keep-alive pool of idle VMs and its memory-pressure watch, the VMM
// pool of standby VMs and the ready clones. Each is generic over the
// daemon's VM handle and reaches the rest of the daemon only through its
// Deps: the pools hold VMs, the daemon starts, stops and records them.
package pool

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
)

// Admission decides when a VM may start: a host budget (live VMs and the
// memory they may use, guest RAM plus the cgroup overhead each) and a
// function's own concurrency limit. A start that does not fit waits in a
// bounded FIFO queue, up to a timeout; a full queue or the timeout is
// errdefs.ErrTooMany (429 with Retry-After). Room is given back when the VM's
// process is gone.
type Admission struct {
	maxVMs   int           // live VMs
	memMiB   int           // memory budget of live VMs
	queueMax int           // waiting starts
	timeout  time.Duration // longest wait

	mu    sync.Mutex
	vms   int
	mem   int
	perFn map[string]int
	queue []*ticket

	// Reclaim, if set, frees room held by idle VMs (the keep-alive pool)
	// when a start does not fit; false if there was none.
	Reclaim func() bool

	// Observe, if set, is told each wait's outcome ("admitted", "queue_full",
	// "timeout", "canceled") and length, and the queue depth after it.
	Observe func(outcome string, waited time.Duration, depth int)
}

type ticket struct {
	fn      string
	mem     int
	fnMax   int
	granted chan struct{} // closed when admitted
}

// NewAdmission makes an admission of maxVMs live VMs using memMiB, with
// queueMax starts waiting up to timeout each.
func NewAdmission(maxVMs, memMiB, queueMax int, timeout time.Duration) *Admission {
	return &Admission{maxVMs: maxVMs, memMiB: memMiB, queueMax: queueMax, timeout: timeout, perFn: map[string]int{}}
}

// fits says whether a start of t may proceed now (a.mu held).
func (a *Admission) fits(t *ticket) bool {
	return a.vms < a.maxVMs && a.mem+t.mem <= a.memMiB && (t.fnMax <= 0 || a.perFn[t.fn] < t.fnMax)
}

func (a *Admission) take(t *ticket) {
	a.vms++
	a.mem += t.mem
	a.perFn[t.fn]++
	close(t.granted)
}

// Acquire waits until a VM of function fn using memMiB (guest plus
// overhead) may start, its function allowing fnMax live VMs (0: no
// limit). release gives the room back; it may be called more than once.
func (a *Admission) Acquire(ctx context.Context, fn string, memMiB, fnMax int) (release func(), err error) {
	t := &ticket{fn: fn, mem: memMiB, fnMax: fnMax, granted: make(chan struct{})}
	start := time.Now()
	a.mu.Lock()
	if memMiB > a.memMiB {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: a VM of %s needs %d MiB, more than the whole VM memory budget of %d MiB (thawd --vm-memory-budget)", errdefs.ErrInvalid, fn, memMiB, a.memMiB)
	}
	switch {
	case len(a.queue) == 0 && a.fits(t):
		a.take(t)
	case len(a.queue) >= a.queueMax && !a.fits(t):
		depth := len(a.queue)
		a.mu.Unlock()
		a.note("queue_full", 0, depth)
		return nil, fmt.Errorf("%w: %s; %d starts are already waiting (thawd --admission-queue)", errdefs.ErrTooMany, a.busy(fn, fnMax), depth)
	default:
		a.queue = append(a.queue, t)
		a.dispatch()
	}
	a.mu.Unlock()
	// Idle VMs give way to a start that waits (each reclaimed VM's release
	// admits waiting starts).
	for a.Reclaim != nil && a.waiting(t) && a.Reclaim() {
	}

	timer := time.NewTimer(a.timeout)
	defer timer.Stop()
	outcome := "admitted"
	select {
	case <-t.granted:
	case <-timer.C:
		outcome = "timeout"
	case <-ctx.Done():
		outcome = "canceled"
	}
	if outcome != "admitted" && !a.withdraw(t) {
		outcome = "admitted" // granted as it gave up: take it
	}
	a.mu.Lock()
	depth := len(a.queue)
	a.mu.Unlock()
	a.note(outcome, time.Since(start), depth)
	switch outcome {
	case "timeout":
		return nil, fmt.Errorf("%w: %s, and no room came within %s (thawd --admission-timeout)", errdefs.ErrTooMany, a.busy(fn, fnMax), a.timeout)
	case "canceled":
		return nil, ctx.Err()
	}
	var once sync.Once
	return func() { once.Do(func() { a.release(t) }) }, nil
}

// TryAcquire admits a start only if it fits now and nothing waits (the
// VMM pool's fills never queue); release as for Acquire.
func (a *Admission) TryAcquire(fn string, memMiB, fnMax int) (release func(), ok bool) {
	t := &ticket{fn: fn, mem: memMiB, fnMax: fnMax, granted: make(chan struct{})}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.queue) > 0 || !a.fits(t) {
		return nil, false
	}
	a.take(t)
	var once sync.Once
	return func() { once.Do(func() { a.release(t) }) }, true
}

// withdraw takes a waiting ticket out of the queue; false if it was
// granted meanwhile.
func (a *Admission) withdraw(t *ticket) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, q := range a.queue {
		if q == t {
			a.queue = append(a.queue[:i], a.queue[i+1:]...)
			return true
		}
	}
	return false
}

// release gives t's room back and admits waiting starts, in order, as
// long as they fit; one that does not fit yet (its function at its limit)
// does not hold back the others.
func (a *Admission) release(t *ticket) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.vms--
	a.mem -= t.mem
	if a.perFn[t.fn]--; a.perFn[t.fn] <= 0 {
		delete(a.perFn, t.fn)
	}
	a.dispatch()
}

// dispatch admits waiting starts in order while they fit (a.mu held).
func (a *Admission) dispatch() {
	kept := a.queue[:0]
	for _, q := range a.queue {
		if a.fits(q) {
			a.take(q)
		} else {
			kept = append(kept, q)
		}
	}
	a.queue = kept
}

// busy says what is full, for errors.
func (a *Admission) busy(fn string, fnMax int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if fnMax > 0 && a.perFn[fn] >= fnMax {
		return fmt.Sprintf("function %s runs %d VMs, its limit (max_concurrency)", fn, a.perFn[fn])
	}
	return fmt.Sprintf("%d VMs using %d MiB are live (limits: %d VMs, thawd --max-vms; %d MiB, --vm-memory-budget)", a.vms, a.mem, a.maxVMs, a.memMiB)
}

func (a *Admission) note(outcome string, waited time.Duration, depth int) {
	if a.Observe != nil {
		a.Observe(outcome, waited, depth)
	}
}

// waiting says whether t is still queued.
func (a *Admission) waiting(t *ticket) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Contains(a.queue, t)
}

// Queued is how many VM starts wait for room.
func (a *Admission) Queued() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.queue)
}
