// Package readyclones sizes the ready clones a daemon keeps per function
// version and strategy: VMs restored, resumed and warmed ahead of a
// request, each handed to exactly one request. It is pure: the daemon
// reports when requests begin and end, how long a taken clone took to be
// replaced and what a ready clone measured, and asks how many clones to
// keep and what each costs.
//
// How many: a request finds a clone if fewer requests than the clones
// kept took one during the time a replacement takes (a refill), so the
// clones needed follow the arrival rate times the refill time (Little's
// law on the refill pipeline, not on the request, whose length does not
// matter: a clone serves one request and is not given back), plus what
// bursts add. Want reads this off the window's own arrivals: for each, how
// many requests arrived within one refill time before it, itself included;
// the quantile HitShare of those counts is the clones that would have
// served that share of the window's requests. At least the minimum asked
// for, at most a cap; a key whose window is empty decays to its minimum.
// Allocate then fits every key's want into a memory budget.
package readyclones

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"
)

// ErrPolicy: a policy that cannot size anything.
var ErrPolicy = errors.New("invalid ready-clone policy")

// Policy says how demand becomes a number of clones.
type Policy struct {
	Window   time.Duration // the sliding window arrivals are read over
	HitShare float64       // of the window's requests, the share that should find a clone, in (0, 1]
	Refill   time.Duration // a refill's time until one is measured
	MinReady int           // clones kept whatever the demand
	Max      int           // clones at most per key (0: no cap)
}

// DefaultPolicy reads a 60 s window, for 92% of its requests (a margin
// over a target of 90%), with a refill time of 2 s until one is measured.
func DefaultPolicy() Policy {
	return Policy{Window: time.Minute, HitShare: 0.92, Refill: 2 * time.Second}
}

// Validate reports every problem at once.
func (p Policy) Validate() error {
	var errs []error
	if p.Window <= 0 || p.Refill <= 0 {
		errs = append(errs, fmt.Errorf("%w: window %s and refill %s: want both above 0", ErrPolicy, p.Window, p.Refill))
	}
	if !(p.HitShare > 0 && p.HitShare <= 1) {
		errs = append(errs, fmt.Errorf("%w: hit share %v: want (0, 1]", ErrPolicy, p.HitShare))
	}
	if p.MinReady < 0 || p.Max < 0 || (p.Max > 0 && p.MinReady > p.Max) {
		errs = append(errs, fmt.Errorf("%w: min ready %d, max %d: want 0 <= min <= max (max 0: no cap)", ErrPolicy, p.MinReady, p.Max))
	}
	return errors.Join(errs...)
}

// maxArrivals bounds the arrivals a Demand remembers (the oldest go first).
const maxArrivals = 4096

// refillWeight is the weight of a new refill time in the estimate.
const refillWeight = 0.25

// Demand is one key's recent arrivals and refill time. It is not safe for
// concurrent use: the daemon holds its own lock around it.
type Demand struct {
	p        Policy
	current  int         // requests in flight now
	arrivals []time.Time // the window's, oldest first
	refill   time.Duration
	refills  int // refill times measured
}

// NewDemand starts an empty record under policy p (valid).
func NewDemand(p Policy) *Demand {
	return &Demand{p: p, refill: p.Refill}
}

// Begin records a request arriving at now.
func (d *Demand) Begin(now time.Time) {
	d.current++
	d.prune(now)
	if len(d.arrivals) == maxArrivals {
		d.arrivals = slices.Delete(d.arrivals, 0, 1)
	}
	d.arrivals = append(d.arrivals, now)
}

// End records a request finishing.
func (d *Demand) End(time.Time) { d.current = max(d.current-1, 0) }

// InFlight is how many requests are under way.
func (d *Demand) InFlight() int { return d.current }

// Refilled records how long a taken clone took to be replaced: from the
// take to its replacement ready (waiting for a fill to start included).
// Fills that replace none (the pool growing) are not refill times.
func (d *Demand) Refilled(took time.Duration) {
	if took <= 0 {
		return
	}
	if d.refills == 0 {
		d.refill = took
	} else {
		d.refill = time.Duration(refillWeight*float64(took) + (1-refillWeight)*float64(d.refill))
	}
	d.refills++
}

// RefillTime is the refill time Want sizes with: the policy's until one
// is measured, then a moving average of those measured.
func (d *Demand) RefillTime() time.Duration { return d.refill }

// prune forgets the arrivals that left the window ending at now.
func (d *Demand) prune(now time.Time) {
	from := now.Add(-d.p.Window)
	i := 0
	for i < len(d.arrivals) && !d.arrivals[i].After(from) {
		i++
	}
	d.arrivals = slices.Delete(d.arrivals, 0, i)
}

// Want is how many ready clones the key should keep at now.
func (d *Demand) Want(now time.Time) int {
	d.prune(now)
	k := Needed(d.arrivals, d.refill, d.p.HitShare)
	if d.current > 0 {
		k = max(k, 1)
	}
	k = max(k, d.p.MinReady)
	if d.p.Max > 0 {
		k = min(k, d.p.Max)
	}
	return k
}

// Needed is the number of clones that would have served share of the
// requests arriving at arrivals (in order), each taken clone replaced
// refill later: for each arrival, the arrivals within refill before it,
// itself included; their quantile share. 0 without arrivals.
func Needed(arrivals []time.Time, refill time.Duration, share float64) int {
	if len(arrivals) == 0 {
		return 0
	}
	counts := make([]int, len(arrivals))
	first := 0
	for i, a := range arrivals {
		for a.Sub(arrivals[first]) >= refill {
			first++
		}
		counts[i] = i - first + 1
	}
	slices.Sort(counts)
	return counts[max(int(math.Ceil(share*float64(len(counts))))-1, 0)]
}

// Idle says whether the window holds no request at all (the key's record
// may be forgotten once it also wants no clone).
func (d *Demand) Idle(now time.Time) bool {
	d.prune(now)
	return len(d.arrivals) == 0 && d.current == 0
}

// Want is one key's ask for the budget.
type Want[K comparable] struct {
	Key    K
	Clones int // Demand.Want
	Min    int // clones it gets before any key gets more than its minimum
	MemMiB int // one clone's memory
}

// Allocate fits wants into budgetMiB: first each key's minimum, then one
// clone at a time round robin, in the order given, until every want is met
// or no further clone fits. It returns how many clones each key may keep.
func Allocate[K comparable](wants []Want[K], budgetMiB int) map[K]int {
	got := make(map[K]int, len(wants))
	left := budgetMiB
	for _, phase := range []func(Want[K]) int{
		func(w Want[K]) int { return min(w.Min, w.Clones) },
		func(w Want[K]) int { return w.Clones },
	} {
		for progress := true; progress; {
			progress = false
			for _, w := range wants {
				if got[w.Key] >= phase(w) || w.MemMiB <= 0 || w.MemMiB > left {
					continue
				}
				got[w.Key]++
				left -= w.MemMiB
				progress = true
			}
		}
	}
	return got
}
