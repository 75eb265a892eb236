package pool

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/readyclones"
)

// Requests and ready clones: the demand each request counts, taking a
// clone, and the clones dropped, forgotten or reclaimed.

// Ticket is a request that could take a ready clone.
type Ticket[V any] struct {
	r       *Ready[V]
	d       *readyclones.Demand
	pending atomic.Bool // not served by a ready clone (yet)
}

// Begin records a request that could take a ready clone of key; its End
// records its end. Until it takes a clone (Served) or ends, no fill
// starts: a request that will restore comes first.
func (r *Ready[V]) Begin(key Key) *Ticket[V] {
	tk := &Ticket[V]{r: r}
	if !r.On() {
		return tk
	}
	r.mu.Lock()
	tk.d = r.demand[key]
	if tk.d == nil {
		tk.d = readyclones.NewDemand(r.policy)
		r.demand[key] = tk.d
	}
	tk.d.Begin(time.Now())
	r.mu.Unlock()
	tk.pending.Store(true)
	r.unserved.Add(1)
	return tk
}

// Missed says the request found no ready clone and goes on without one:
// from then its restore, counted as restores are, holds fills back (until
// it is restored, not until it ends: a long request does not keep its
// successors' clones from being filled).
func (tk *Ticket[V]) Missed() { tk.Served() }

// Served says the request took a ready clone.
func (tk *Ticket[V]) Served() {
	if tk.pending.CompareAndSwap(true, false) {
		tk.r.unserved.Add(-1)
	}
}

// End records the request's end.
func (tk *Ticket[V]) End() {
	if tk.d == nil {
		return
	}
	tk.Served()
	tk.r.mu.Lock()
	tk.d.End(time.Now())
	tk.r.mu.Unlock()
	tk.r.Kick()
}

// Dispatch records that tk's request runs on a ready clone: fills wait
// Hold (or its end, Hold negative); done records its end: fills wait
// Settle, then the loop is kicked.
func (r *Ready[V]) Dispatch(tk *Ticket[V]) (done func()) {
	r.dispatching.Add(1)
	r.holdFills(r.cfg.Hold)
	tk.Served()
	return func() {
		r.holdFills(r.cfg.Settle)
		r.dispatching.Add(-1)
		r.Kick()
	}
}

// holdFills keeps fills from starting for d from now (none if d <= 0),
// and kicks the loop then.
func (r *Ready[V]) holdFills(d time.Duration) {
	if d <= 0 {
		return
	}
	until := time.Now().Add(d).UnixNano()
	for old := r.settled.Load(); old < until && !r.settled.CompareAndSwap(old, until); old = r.settled.Load() {
	}
	time.AfterFunc(d, r.Kick)
}

// Outcome counts a request's outcome ("hit", "miss", "failed") and, for a
// hit, how long its clone waited.
func (r *Ready[V]) Outcome(outcome string, waitedS float64) { r.m.Outcome(outcome, waitedS) }

// Take hands out the oldest live ready clone of key, or nil; dead says
// why a clone taken on the way was not live (it is stopped). The caller
// owns the clone (its room included) from then.
func (r *Ready[V]) Take(key Key) (rc *Clone[V], dead string) {
	var gone []*Clone[V]
	r.mu.Lock()
	for _, k := range r.keysFor(key) {
		for list := r.clones[k]; len(list) > 0 && rc == nil; list = r.clones[k] {
			c := list[0]
			r.clones[k] = list[1:]
			c.timer.Stop()
			r.memMiB -= c.mem
			if r.deps.Alive(c.VM) {
				rc = c
				r.taken[k] = append(r.taken[k], time.Now())
			} else {
				gone = append(gone, c)
			}
		}
		if rc != nil {
			break
		}
	}
	r.mu.Unlock()
	for _, c := range gone {
		r.m.Drop(readyDropLabel[WhyReadyDied])
		exit := r.deps.Fail(c.VM, WhyReadyDied)
		dead = fmt.Sprintf("ready clone %s died while waiting: %s", c.Rec.ID, exit)
	}
	if len(gone) > 0 {
		r.Kick()
	}
	return rc, dead
}

// keysFor are the keys whose clones a request of key may take (r.mu
// held): key's own; under auto then those of every strategy of its
// snapshot, by strategy name.
func (r *Ready[V]) keysFor(key Key) []Key {
	keys := []Key{key}
	if key.Kind != ReadyAuto {
		return keys
	}
	for k, list := range r.clones {
		if k.Snapshot == key.Snapshot && k != key && len(list) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys[1:], func(a, b Key) int { return cmp.Compare(a.Kind, b.Kind) })
	return keys
}

// Drop stops a ready clone and forgets it, if it is still waiting.
func (r *Ready[V]) Drop(rc *Clone[V], why string) {
	if !r.unpool(func(c *Clone[V]) bool { return c == rc }) {
		return
	}
	r.m.Drop(readyDropLabel[why])
	r.deps.Log.Debug("ready clone stopped", "vm", rc.Rec.ID, "reason", why)
	r.deps.Retire(rc.VM, rc.Rec, why)
}

// unpool takes the ready clones match selects out of the pool; false if
// there were none.
func (r *Ready[V]) unpool(match func(*Clone[V]) bool) bool {
	return removeWhere(&r.mu, &r.clones, match, func(c *Clone[V]) {
		c.timer.Stop()
		r.memMiB -= c.mem
	})
}

// Forget takes VM id out of the ready clones, if it is one (it is being
// deleted).
func (r *Ready[V]) Forget(id string) {
	r.unpool(func(c *Clone[V]) bool { return c.Rec.ID == id })
}

// DropWhere stops every ready clone match selects.
func (r *Ready[V]) DropWhere(match func(*Clone[V]) bool, why string) {
	eachWhere(&r.mu, &r.clones, match, func(rc *Clone[V]) { r.Drop(rc, why) })
}

// Hold stops (or allows again) fills for snapshot id.
func (r *Ready[V]) Hold(id string, hold bool) { setHeld(&r.mu, r.held, id, hold) }

// DropSnapshot stops snapshot id's ready clones and forgets its demand;
// clones still starting are discarded when ready, and it waits for them
// (up to the boot timeout).
func (r *Ready[V]) DropSnapshot(id, why string) {
	r.mu.Lock()
	r.epoch[id]++
	for key := range r.demand {
		if key.Snapshot == id {
			r.forget(key)
		}
	}
	r.mu.Unlock()
	r.DropWhere(func(rc *Clone[V]) bool { return rc.Key.Snapshot == id }, why)
	waitFills(&r.mu, r.filling, id, r.deps.BootTimeout)
}

// Reclaim stops the oldest ready clone for why (a start needs room, host
// memory is low); false if there is none.
func (r *Ready[V]) Reclaim(why string) bool {
	return withOldest(&r.mu, &r.clones, func(rc *Clone[V]) time.Time { return rc.since },
		func(rc *Clone[V]) { r.Drop(rc, why) })
}

// State is what a metrics scrape reads.
func (r *Ready[V]) State() metrics.ReadyState {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st metrics.ReadyState
	now := time.Now()
	for _, list := range r.clones {
		for _, rc := range list {
			st.Clones++
			st.MemoryMiB += rc.mem
			st.OldestAgeS = max(st.OldestAgeS, now.Sub(rc.since).Seconds())
		}
	}
	return st
}

// MarkMemory sets ReadyMiB on each of vms that waits in the pool listed
// ready: the MiB it counts against --standby-memory (what State sums).
func (r *Ready[V]) MarkMemory(vms ...*catalog.VM) {
	counted := map[string]int{}
	r.mu.Lock()
	for _, list := range r.clones {
		for _, rc := range list {
			counted[rc.Rec.ID] = rc.mem
		}
	}
	r.mu.Unlock()
	for _, v := range vms {
		if mib, ok := counted[v.ID]; ok && v.State == catalog.StateReady {
			v.ReadyMiB = mib
		}
	}
}

// Count is how many ready clones wait.
func (r *Ready[V]) Count() int { return count(&r.mu, &r.clones) }

// Filling is how many fills are under way.
func (r *Ready[V]) Filling() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fills
}

// DemandKeys are the keys whose demand is followed, in order.
func (r *Ready[V]) DemandKeys() []Key {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]Key, 0, len(r.demand))
	for k := range r.demand {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// Close stops the clones' timers and empties the pool; the daemon stops
// the VMs themselves.
func (r *Ready[V]) Close() {
	stopAll(&r.mu, &r.clones, func(rc *Clone[V]) *time.Timer { return rc.timer })
}
