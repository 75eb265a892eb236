package pool

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/readyclones"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// Ready clones: VMs restored from a function version's snapshot, resumed,
// renewed and their agent's request paths warmed with no-ops (a ping, an
// invocation the agent refuses before any handler) ahead
// of a request, that have served none. An invocation that names no
// snapshot or strategy takes one, renews it (clock, entropy, secrets,
// on_restore) and runs its event on it: a clone no earlier request has
// touched, at close to a warm call's latency. Unlike the VMM pool's
// standby VMs (a VMM started, nothing restored) a ready clone's guest
// runs; unlike a kept VM (keep-alive) it has run no handler.
//
// How many each (snapshot, strategy) keeps follows its recent arrivals
// and how long a taken clone takes to be replaced (package readyclones:
// enough for 92% of the window's requests to have found one,
// --min-ready at least, none once idle for the window), fitted into
// --standby-memory, where each clone counts what it was measured to hold
// once ready, and the admission budget. A sizing loop drops the surplus
// and starts refills in the background, one at a time by default, only
// while no request waits for room or restores, through the VMM pool.
// A clone that waits longer than --ready-max-age is recycled; ready clones
// give way first when a start needs room or host memory runs low.

// ReadyConfig configures ready clones. Zero values take the defaults;
// MemoryMiB 0 keeps none.
type ReadyConfig struct {
	// MemoryMiB bounds the memory ready clones hold together (thawd
	// --standby-memory; 0: none): each counts its VMM's proportional set
	// size measured once it was ready; a clone not measured yet counts the
	// most its key's latest clones measured, or guest RAM plus the VM
	// memory overhead before any was.
	MemoryMiB int
	// MinReady is how many each snapshot and strategy that has had
	// traffic keeps even when idle (--min-ready, like min instances).
	MinReady int
	// MaxPerKey caps the clones of one snapshot and strategy (default 16).
	MaxPerKey int
	// MaxAge: a clone that has waited this long is recycled
	// (--ready-max-age; default 10 minutes).
	MaxAge time.Duration
	// Window is how far back demand is read (--ready-window; default
	// 60 s, in buckets of a second or a sixtieth of a shorter window).
	Window time.Duration
	// Fills is how many clones may start at once (default 1).
	Fills int
	// Interval is how often the sizes are computed again (default 250 ms).
	Interval time.Duration
	// Settle is how long after a request served by a ready clone ends no
	// fill starts (default 100 ms; negative: none): its answer leaves
	// the daemon before a refill's VMM start takes the CPU.
	Settle time.Duration
	// Hold is how long a request served by a ready clone holds fills back
	// at most (default 250 ms; negative: until it ends): a short request
	// has the CPU to itself, and a long one does not keep its successors'
	// clones from being refilled.
	Hold time.Duration
}

// SetDefaults fills the zero settings.
func (c *ReadyConfig) SetDefaults() {
	if c.MaxPerKey == 0 {
		c.MaxPerKey = 16
	}
	if c.MaxAge == 0 {
		c.MaxAge = 10 * time.Minute
	}
	if c.Window == 0 {
		c.Window = time.Minute
	}
	if c.Fills == 0 {
		c.Fills = 1
	}
	if c.Interval == 0 {
		c.Interval = 250 * time.Millisecond
	}
	if c.Settle == 0 {
		c.Settle = 100 * time.Millisecond
	}
	if c.Hold == 0 {
		c.Hold = 250 * time.Millisecond
	}
}

// readyRetry is how long a key waits for its next fill after one failed.
var readyRetry = 5 * time.Second

// policy is the sizing policy c sets.
func (c *ReadyConfig) policy() readyclones.Policy {
	p := readyclones.DefaultPolicy()
	p.Window, p.MinReady, p.Max = c.Window, c.MinReady, c.MaxPerKey
	return p
}

// Validate reports every problem of c at once.
func (c *ReadyConfig) Validate() []error {
	var errs []error
	if c.MemoryMiB < 0 {
		errs = append(errs, fmt.Errorf("standby memory %d MiB: must not be negative (0: no ready clones)", c.MemoryMiB))
	} else if c.MemoryMiB == 0 && c.MinReady > 0 {
		errs = append(errs, fmt.Errorf("min ready %d needs ready clones: give them memory (thawd --standby-memory)", c.MinReady))
	}
	if c.MaxAge < 0 || c.Fills < 0 || c.Interval < 0 {
		errs = append(errs, errors.New("ready clones' max age, fills and interval must not be negative"))
	}
	if c.Window < 0 || (c.Window > 0 && c.Window < 60*time.Millisecond) {
		errs = append(errs, fmt.Errorf("ready window %s: give 60ms or more", c.Window))
	} else if err := c.policy().Validate(); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Clone is a ready clone waiting for a request; V is the daemon's VM handle.
type Clone[V any] struct {
	Key   Key
	VM    V
	Rec   *catalog.VM // its record; Rec.ID is the VM's id
	mem   int         // MiB counted against --standby-memory: measured, or the key's estimate
	since time.Time
	timer *time.Timer // its age limit
}

// Since is when the clone became ready.
func (c *Clone[V]) Since() time.Time { return c.since }

// ReadyDeps is what the ready clones need of the daemon.
type ReadyDeps[V any] struct {
	// Start restores a clone of key (from a standby VM if there is one),
	// warms its agent and records it ready. It owns the room release gives
	// back (on an error it has called release or stopped the VM).
	Start func(ctx context.Context, key Key, release func()) (vm V, rec *catalog.VM, err error)
	// Function is the function snapshot belongs to (ErrNotFound: gone).
	Function func(ctx context.Context, snapshot string) (*catalog.Function, error)
	// Listed records a clone ready (the catalog lists it so) once it is
	// in the pool, where a request can take it; pooled says whether it
	// still waits there (a request may have taken it, or a drop stopped
	// it, meanwhile). nil: the clone is listed as Start left it.
	Listed func(vm V, pooled func() bool)
	// Retire stops a VM and forgets it.
	Retire func(vm V, rec *catalog.VM, why string)
	// Alive says whether a clone's VM still runs.
	Alive func(vm V) bool
	// Fail stops a clone found dead, its record kept failed with why, and
	// says why its VM exited.
	Fail func(vm V, why string) (exit string)
	// Admit admits a start only if it fits now (admission's TryAcquire).
	Admit func(fn string, memMiB, fnMax int) (release func(), ok bool)
	// Restoring is how many restores are under way.
	Restoring func() int64
	// Measure reads a ready clone's memory in MiB (its VMM's proportional
	// set size); nil or an error: it counts its key's estimate.
	Measure func(vm V) (mib int, err error)
	// Go runs f in the background, waited for by the daemon's Close;
	// false if the daemon is closing (f does not run).
	Go func(f func()) bool
	// Closed says whether the daemon is closing.
	Closed func() bool
	// Metrics registers the ready clones' metrics.
	Metrics *metrics.Set
	Log     *slog.Logger
	// OverheadMiB is a VM's memory beyond its guest RAM; BootTimeout the
	// longest wait for fills when a snapshot's clones are dropped.
	OverheadMiB int
	BootTimeout time.Duration
}

// Ready keeps the ready clones.
type Ready[V any] struct {
	cfg  ReadyConfig
	deps ReadyDeps[V]

	mu      sync.Mutex
	clones  map[Key][]*Clone[V] // oldest first
	filling map[Key]int
	fills   int // all fills under way
	memMiB  int // of ready and filling clones
	demand  map[Key]*readyclones.Demand
	costs   map[Key]*readyclones.Cost // what each key's clone holds
	taken   map[Key][]time.Time       // per key, clones taken and not replaced yet, oldest first
	fns     map[Key]*catalog.Function // the function each key's snapshot belongs to
	// epoch counts, per snapshot, the times its clones were dropped: a
	// fill begun before is discarded. held: snapshots being deleted.
	epoch map[string]uint64
	held  map[string]bool
	// retryAt: after a failed fill, no fill of that key starts before it.
	retryAt map[Key]time.Time
	kick    chan struct{}
	// dispatching counts requests running on ready clones: no fill
	// starts during a request's first Hold, nor until Settle after it
	// ended (its answer is still being written), so a refill does not
	// take the CPU from a short hit.
	dispatching atomic.Int64
	settled     atomic.Int64 // unix ns from which fills may start again
	// unserved counts requests that could take a ready clone and have
	// not got one yet (then they restore): no fill starts meanwhile.
	unserved atomic.Int64
	policy   readyclones.Policy
	m        *metrics.ReadyClones
}

// Why ready clones are stopped unused, and the metric label of each.
const (
	WhyReadyAged    = "ready clone waited its longest"
	WhyReadySurplus = "more ready clones than demand"
	WhyReadyRoom    = "room needed for another VM"
	WhyReadyDied    = "ready clone died"
	WhyReadyGone    = "its snapshot or function deleted"
	WhyReadyEvicted = "snapshot evicted or stored"
)

var readyDropLabel = map[string]string{WhyReadyAged: "aged", WhyReadySurplus: "surplus", WhyReadyRoom: "room",
	WhyPressure: "memory_pressure", WhyReadyDied: "died", WhyReadyGone: "deleted", WhyReadyEvicted: "evicted"}

// NewReady makes the ready clones' state and registers their metrics.
func NewReady[V any](cfg ReadyConfig, deps ReadyDeps[V]) *Ready[V] {
	r := &Ready[V]{cfg: cfg, deps: deps,
		clones: map[Key][]*Clone[V]{}, filling: map[Key]int{}, demand: map[Key]*readyclones.Demand{},
		costs: map[Key]*readyclones.Cost{}, taken: map[Key][]time.Time{}, fns: map[Key]*catalog.Function{},
		epoch: map[string]uint64{}, held: map[string]bool{}, retryAt: map[Key]time.Time{}, kick: make(chan struct{}, 1), policy: cfg.policy()}
	r.m = deps.Metrics.NewReadyClones(r.State)
	return r
}

// On says whether ready clones are kept at all.
func (r *Ready[V]) On() bool { return r.cfg.MemoryMiB > 0 }

// Kick makes the sizing loop run now.
func (r *Ready[V]) Kick() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Loop sizes the ready clones every interval, and when demand changes,
// until stop is closed.
func (r *Ready[V]) Loop(stop <-chan struct{}) {
	every(stop, r.cfg.Interval, r.kick, func() { r.size(time.Now()) })
}

// ReadyAuto is the strategy of the ready clones' key of a function under
// auto: its requests take a clone of any strategy of the snapshot (a hit
// restores nothing, whichever strategy restored the clone), and its fills
// restore with the policy's current choice.
const ReadyAuto restore.Kind = wire.StrategyAuto

// ReadyKeyOf is the ready clones' key of a pooled request for snapshot
// snapID restoring with kind, or under auto.
func ReadyKeyOf(snapID string, kind restore.Kind, auto bool) Key {
	if auto {
		return Key{Snapshot: snapID, Kind: ReadyAuto}
	}
	return Key{Snapshot: snapID, Kind: kind}
}

// functions finds the function of each key that has none yet; keys whose
// snapshot is gone are forgotten.
func (r *Ready[V]) functions(ctx context.Context) {
	r.mu.Lock()
	var missing []Key
	for key := range r.demand {
		if r.fns[key] == nil {
			missing = append(missing, key)
		}
	}
	r.mu.Unlock()
	for _, key := range missing {
		fn, err := r.deps.Function(ctx, key.Snapshot)
		r.mu.Lock()
		if err != nil {
			r.forget(key)
		} else if r.demand[key] != nil {
			r.fns[key] = fn
		}
		r.mu.Unlock()
	}
}

// mem is what one clone of key (of fn) not measured yet counts against
// --standby-memory (r.mu held).
func (r *Ready[V]) mem(key Key, fn *catalog.Function) int {
	c := r.costs[key]
	if c == nil {
		c = readyclones.NewCost(fn.MemoryMiB + r.deps.OverheadMiB)
		r.costs[key] = c
	}
	return c.Estimate()
}

// forget drops what is known of key's demand (r.mu held).
func (r *Ready[V]) forget(key Key) {
	delete(r.demand, key)
	delete(r.fns, key)
	delete(r.retryAt, key)
	delete(r.costs, key)
	delete(r.taken, key)
}

// compareKeys orders keys by snapshot, then strategy.
func compareKeys(a, b Key) int {
	return cmp.Or(cmp.Compare(a.Snapshot, b.Snapshot), cmp.Compare(a.Kind, b.Kind))
}

// size computes every key's share of the budget, drops the surplus and
// starts fills toward it.
func (r *Ready[V]) size(now time.Time) {
	r.functions(context.Background())
	r.mu.Lock()
	keys := make([]Key, 0, len(r.demand))
	for key := range r.demand {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, compareKeys)
	var wants []readyclones.Want[Key]
	for _, key := range keys {
		d, fn := r.demand[key], r.fns[key]
		if fn == nil {
			continue
		}
		w := d.Want(now)
		if w == 0 && d.Idle(now) && len(r.clones[key]) == 0 && r.filling[key] == 0 {
			r.forget(key) // idle for the whole window: forgotten
			continue
		}
		wants = append(wants, readyclones.Want[Key]{Key: key, Clones: w, Min: min(r.cfg.MinReady, w), MemMiB: r.mem(key, fn)})
	}
	alloc := readyclones.Allocate(wants, r.cfg.MemoryMiB)
	var surplus []*Clone[V]
	for _, w := range wants {
		list := r.clones[w.Key]
		// Only ready clones beyond the allocation are surplus: a fill under
		// way does not make one so (a request may be about to take it; the
		// fill's clone, once ready, is the surplus if the want stays low).
		if extra := len(list) - alloc[w.Key]; extra > 0 {
			surplus = append(surplus, list[:extra]...)
		}
		r.owe(w.Key, alloc[w.Key]-len(list), now)
	}
	r.mu.Unlock()
	for _, rc := range surplus {
		r.Drop(rc, WhyReadySurplus)
	}
	for _, w := range wants {
		for r.fillFor(w, alloc[w.Key]) {
		}
	}
}

// fillFor starts one fill for w's key if it has fewer than want clones, a
// fill may start, nothing waits for room and no request is restoring;
// false if it started none.
func (r *Ready[V]) fillFor(w readyclones.Want[Key], want int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn := r.fns[w.Key]
	have := len(r.clones[w.Key]) + r.filling[w.Key]
	fills := r.fills
	if fn == nil || have >= want || fills >= r.cfg.Fills || r.memMiB+w.MemMiB > r.cfg.MemoryMiB ||
		r.held[w.Key.Snapshot] || r.deps.Restoring() > int64(fills) || (r.cfg.Hold < 0 && r.dispatching.Load() > 0) ||
		r.unserved.Load() > 0 || time.Now().UnixNano() < r.settled.Load() ||
		time.Now().Before(r.retryAt[w.Key]) {
		return false // requests restoring or on ready clones come first (each fill restores too)
	}
	// Admission reserves the clone's full room (what it may grow to once it
	// serves), never while a start waits; --standby-memory what it holds.
	release, ok := r.deps.Admit(fn.Name, fn.MemoryMiB+r.deps.OverheadMiB, fn.MaxConcurrency)
	if !ok {
		return false
	}
	epoch := r.epoch[w.Key.Snapshot]
	// The fill waits for r.mu, so it counts as filling before it ends.
	if !r.deps.Go(func() { r.fill(w.Key, w.MemMiB, epoch, release) }) {
		release()
		return false
	}
	r.filling[w.Key]++
	r.fills++
	r.memMiB += w.MemMiB
	return true
}

// fill starts one ready clone of key and adds it to the pool.
func (r *Ready[V]) fill(key Key, mem int, epoch uint64, release func()) {
	t0 := time.Now()
	vm, rec, err := r.deps.Start(context.Background(), key, release)
	closed := r.deps.Closed()
	started := err == nil
	measured := 0
	if started && !closed {
		measured = r.measure(vm, rec)
	}
	r.mu.Lock()
	if started && (closed || r.epoch[key.Snapshot] != epoch) {
		// Dropped (deleted, evicted) or stopping while it started: it
		// counts as filling until it is gone, so whoever dropped waits.
		r.mu.Unlock()
		r.deps.Retire(vm, rec, "its snapshot changed while it started")
		r.mu.Lock()
		started = false
	}
	doneFilling(r.filling, key)
	r.fills--
	if !started {
		r.memMiB -= mem
		if errors.Is(err, errdefs.ErrNotFound) {
			r.forget(key)
		}
		if err != nil {
			r.retryAt[key] = time.Now().Add(readyRetry) // a snapshot that fails to restore is not tried in a loop
		}
		r.mu.Unlock()
		if err != nil {
			r.m.Refill("failed")
			r.deps.Log.Warn("ready clone not started", "snapshot", key.Snapshot, "strategy", key.Kind, "err", err)
		}
		return
	}
	rc := &Clone[V]{Key: key, VM: vm, Rec: rec, mem: mem, since: time.Now()}
	r.pool(rc, measured)
	r.mu.Unlock()
	r.Kick() // the next fill, if wanted
	if r.deps.Listed != nil {
		r.deps.Listed(vm, func() bool { return r.pooled(rc) })
	}
	r.m.Refill("ok")
	r.deps.Log.Debug("ready clone ready", "vm", rec.ID, "snapshot", key.Snapshot, "strategy", rec.Strategy,
		"ms", float64(time.Since(t0).Microseconds())/1000, "measured_mib", measured)
}

// pooled says whether rc still waits in the pool.
func (r *Ready[V]) pooled(rc *Clone[V]) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.clones[rc.Key], rc)
}

// measure is what a ready clone holds in MiB (0: not measured).
func (r *Ready[V]) measure(vm V, rec *catalog.VM) int {
	if r.deps.Measure == nil {
		return 0
	}
	mib, err := r.deps.Measure(vm)
	if err != nil {
		r.deps.Log.Debug("ready clone not measured: it counts its estimate", "vm", rec.ID, "err", err)
		return 0
	}
	return mib
}

// pool adds a clone that became ready to the pool (r.mu held): it counts
// what it measured (if it was) instead of what its fill reserved, teaches
// its key's cost, and the time since the oldest clone of its key taken and
// not replaced is the key's refill time (a fill that replaces none, as the
// pool grows, says nothing of it).
func (r *Ready[V]) pool(rc *Clone[V], measuredMiB int) {
	if c := r.costs[rc.Key]; c != nil && measuredMiB > 0 {
		c.Measured(measuredMiB)
	}
	if measuredMiB > 0 {
		r.memMiB += measuredMiB - rc.mem
		rc.mem = measuredMiB
	}
	if q := r.taken[rc.Key]; len(q) > 0 {
		if d := r.demand[rc.Key]; d != nil {
			d.Refilled(rc.since.Sub(q[0]))
		}
		r.taken[rc.Key] = q[1:]
	}
	rc.timer = time.AfterFunc(r.cfg.MaxAge, func() {
		r.Drop(rc, WhyReadyAged)
		r.Kick() // recycled: the loop starts a fresh one if still wanted
	})
	r.clones[rc.Key] = append(r.clones[rc.Key], rc)
}

// owe keeps at most n of key's clones taken and not replaced, the newest
// (r.mu held): those beyond what the key may keep will not be replaced,
// and none older than the window is.
func (r *Ready[V]) owe(key Key, n int, now time.Time) {
	q := r.taken[key]
	from := now.Add(-r.cfg.Window)
	for len(q) > 0 && (len(q) > max(n, 0) || q[0].Before(from)) {
		q = q[1:]
	}
	if len(q) == 0 {
		delete(r.taken, key)
		return
	}
	r.taken[key] = q
}
