// Package readyclones sizes the ready clones a daemon keeps per function
// version and strategy: VMs restored, resumed and warmed ahead of a
// request, each handed to exactly one request. It is pure: the daemon
// reports when requests begin and end, and asks how many clones to keep.
//
// How many: the quantile (p95 by default) of the peak concurrency of each
// bucket of a sliding window, at least one while the window saw any
// request, at least the minimum asked for, at most a cap; a function whose
// window is empty decays to its minimum (zero unless asked). Allocate then
// fits every key's want into a memory budget.
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
	Window   time.Duration // the sliding window demand is read over
	Bucket   time.Duration // its buckets; each keeps its peak concurrency
	Quantile float64       // of the buckets' peaks, in (0, 1]
	MinReady int           // clones kept whatever the demand
	Max      int           // clones at most per key (0: no cap)
}

// DefaultPolicy is a 60 s window of 1 s buckets, their p95.
func DefaultPolicy() Policy {
	return Policy{Window: time.Minute, Bucket: time.Second, Quantile: 0.95}
}

// Validate reports every problem at once.
func (p Policy) Validate() error {
	var errs []error
	if p.Bucket <= 0 || p.Window < p.Bucket {
		errs = append(errs, fmt.Errorf("%w: window %s and bucket %s: want 0 < bucket <= window", ErrPolicy, p.Window, p.Bucket))
	} else if p.Window/p.Bucket > 3600 {
		errs = append(errs, fmt.Errorf("%w: window %s holds more than 3600 buckets of %s", ErrPolicy, p.Window, p.Bucket))
	}
	if !(p.Quantile > 0 && p.Quantile <= 1) {
		errs = append(errs, fmt.Errorf("%w: quantile %v: want (0, 1]", ErrPolicy, p.Quantile))
	}
	if p.MinReady < 0 || p.Max < 0 || (p.Max > 0 && p.MinReady > p.Max) {
		errs = append(errs, fmt.Errorf("%w: min ready %d, max %d: want 0 <= min <= max (max 0: no cap)", ErrPolicy, p.MinReady, p.Max))
	}
	return errors.Join(errs...)
}

func (p Policy) buckets() int { return int(p.Window / p.Bucket) }

// Demand is one key's recent concurrency. It is not safe for concurrent
// use: the daemon holds its own lock around it.
type Demand struct {
	p       Policy
	current int     // requests in flight now
	peaks   []int   // per bucket slot: the peak concurrency in it
	arrived []int   // per bucket slot: requests that began in it
	index   []int64 // per bucket slot: which bucket it holds
	last    int64   // the newest bucket recorded
}

// NewDemand starts an empty record under policy p (valid).
func NewDemand(p Policy) *Demand {
	n := p.buckets()
	return &Demand{p: p, peaks: make([]int, n), arrived: make([]int, n), index: make([]int64, n)}
}

// slot is the slot of the bucket holding now. Buckets since the last
// one recorded are recorded first: the requests in flight then were in
// flight throughout them.
func (d *Demand) slot(now time.Time) int {
	b := now.UnixNano() / int64(d.p.Bucket)
	n := int64(len(d.peaks))
	for g := max(d.last+1, b-n+1); g <= b; g++ {
		i := int(g % n)
		d.index[i], d.peaks[i], d.arrived[i] = g, d.current, 0
	}
	d.last = max(d.last, b)
	return int(b % n)
}

// Begin records a request arriving at now.
func (d *Demand) Begin(now time.Time) {
	d.current++
	i := d.slot(now)
	d.peaks[i] = max(d.peaks[i], d.current)
	d.arrived[i]++
}

// End records a request finishing at now.
func (d *Demand) End(now time.Time) {
	d.slot(now) // a bucket that begins now starts from the concurrency before this end
	d.current = max(d.current-1, 0)
}

// InFlight is how many requests are under way.
func (d *Demand) InFlight() int { return d.current }

// window is each bucket's peak over the window ending at now (a bucket
// without a record counts the requests in flight throughout it), and
// whether any request arrived in it.
func (d *Demand) window(now time.Time) (peaks []int, active bool) {
	last := now.UnixNano() / int64(d.p.Bucket)
	n := int64(len(d.peaks))
	peaks = make([]int, 0, n)
	for b := last - n + 1; b <= last; b++ {
		i := int(((b % n) + n) % n)
		if d.index[i] == b {
			peaks = append(peaks, d.peaks[i])
			active = active || d.arrived[i] > 0
		} else {
			peaks = append(peaks, d.current)
		}
	}
	return peaks, active || d.current > 0
}

// Want is how many ready clones the key should keep at now.
func (d *Demand) Want(now time.Time) int {
	peaks, active := d.window(now)
	slices.Sort(peaks)
	k := peaks[max(int(math.Ceil(d.p.Quantile*float64(len(peaks))))-1, 0)]
	if active {
		k = max(k, 1)
	}
	k = max(k, d.p.MinReady)
	if d.p.Max > 0 {
		k = min(k, d.p.Max)
	}
	return k
}

// Idle says whether the window holds no request at all (the key's record
// may be forgotten once it also wants no clone).
func (d *Demand) Idle(now time.Time) bool {
	_, active := d.window(now)
	return !active
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
