package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
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
// How many each (snapshot, strategy) keeps follows its recent concurrency
// (package readyclones: the p95 of per-second peaks over a sliding
// window, --min-ready at least, none once idle for the window), fitted
// into --standby-memory and the admission budget. A sizing loop drops the
// surplus and starts refills in the background, one at a time by default,
// only while no request waits for room or restores, through the VMM pool.
// A clone that waits longer than --ready-max-age is recycled; ready clones
// give way first when a start needs room or host memory runs low.

// ReadyConfig configures ready clones. Zero values take the defaults;
// MemoryMiB 0 keeps none.
type ReadyConfig struct {
	// MemoryMiB bounds the memory ready clones hold together, guest RAM
	// plus VMMemoryOverheadMiB each (thawd --standby-memory); 0: none.
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
}

func (c *ReadyConfig) setDefaults() {
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
}

// readyRetry is how long a key waits for its next fill after one failed.
var readyRetry = 5 * time.Second

// policy is the sizing policy c sets.
func (c *ReadyConfig) policy() readyclones.Policy {
	p := readyclones.DefaultPolicy()
	p.Window, p.Bucket = c.Window, min(time.Second, c.Window/60)
	p.MinReady, p.Max = c.MinReady, c.MaxPerKey
	return p
}

func (c *ReadyConfig) validate() []error {
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

// readyClone is a ready clone waiting for a request.
type readyClone struct {
	key   poolKey
	lv    *liveVM
	rec   *catalog.VM
	mem   int // MiB counted against --standby-memory
	since time.Time
	timer *time.Timer // its age limit
}

type readyPool struct {
	mu      sync.Mutex
	clones  map[poolKey][]*readyClone // oldest first
	filling map[poolKey]int
	fills   int // all fills under way
	memMiB  int // of ready and filling clones
	demand  map[poolKey]*readyclones.Demand
	fns     map[poolKey]*catalog.Function // the function each key's snapshot belongs to
	// epoch counts, per snapshot, the times its clones were dropped: a
	// fill begun before is discarded. held: snapshots being deleted.
	epoch map[string]uint64
	held  map[string]bool
	// retryAt: after a failed fill, no fill of that key starts before it.
	retryAt map[poolKey]time.Time
	kick    chan struct{}
	// dispatching counts requests running on ready clones: no fill
	// starts meanwhile, nor until Settle after the last one ended (its
	// answer is still being written), so a refill never takes the CPU
	// from a hit.
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
	whyReadyAged    = "ready clone waited its longest"
	whyReadySurplus = "more ready clones than demand"
	whyReadyRoom    = "room needed for another VM"
	whyReadyDied    = "ready clone died"
	whyReadyGone    = "its snapshot or function deleted"
	whyReadyEvicted = "snapshot evicted or stored"
)

var readyDropLabel = map[string]string{whyReadyAged: "aged", whyReadySurplus: "surplus", whyReadyRoom: "room",
	pool.WhyPressure: "memory_pressure", whyReadyDied: "died", whyReadyGone: "deleted", whyReadyEvicted: "evicted"}

// openReady sets up the ready clones' state (Open).
func (s *Service) openReady() {
	r := &s.ready
	r.clones, r.filling, r.demand = map[poolKey][]*readyClone{}, map[poolKey]int{}, map[poolKey]*readyclones.Demand{}
	r.fns, r.epoch, r.held = map[poolKey]*catalog.Function{}, map[string]uint64{}, map[string]bool{}
	r.retryAt = map[poolKey]time.Time{}
	r.kick = make(chan struct{}, 1)
	r.policy = s.cfg.Ready.policy()
	r.m = s.metrics.NewReadyClones(s.readyState)
}

// startReady starts the sizing loop (Start), if ready clones are on.
func (s *Service) startReady() {
	if s.readyOn() {
		s.wg.Add(1)
		go s.readyLoop()
	}
}

func (s *Service) readyOn() bool { return s.cfg.Ready.MemoryMiB > 0 }

func (s *Service) kickReady() {
	select {
	case s.ready.kick <- struct{}{}:
	default:
	}
}

// readyLoop sizes the ready clones every interval, and when demand changes.
func (s *Service) readyLoop() {
	defer s.wg.Done()
	tick := time.NewTicker(s.cfg.Ready.Interval)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		case <-s.ready.kick:
		}
		s.sizeReady(time.Now())
	}
}

// readyAuto is the strategy of the ready clones' key of a function under
// auto: its requests take a clone of any strategy of the snapshot (a hit
// restores nothing, whichever strategy restored the clone), and its fills
// restore with the policy's current choice.
const readyAuto restore.Kind = wire.StrategyAuto

// readyKeyOf is the ready clones' key of a pooled request for snapshot
// snapID restoring with kind, or under auto.
func readyKeyOf(snapID string, kind restore.Kind, auto bool) poolKey {
	if auto {
		return poolKey{Snapshot: snapID, Kind: readyAuto}
	}
	return poolKey{Snapshot: snapID, Kind: kind}
}

// readyTicket is a request that could take a ready clone.
type readyTicket struct {
	s       *Service
	d       *readyclones.Demand
	pending atomic.Bool // not served by a ready clone (yet)
}

// readyBegin records a request that could take a ready clone of key; its
// end records its end. Until it takes a clone (served) or ends, no fill
// starts: a request that will restore comes first.
func (s *Service) readyBegin(key poolKey) *readyTicket {
	tk := &readyTicket{s: s}
	if !s.readyOn() {
		return tk
	}
	s.ready.mu.Lock()
	tk.d = s.ready.demand[key]
	if tk.d == nil {
		tk.d = readyclones.NewDemand(s.ready.policy)
		s.ready.demand[key] = tk.d
	}
	tk.d.Begin(time.Now())
	s.ready.mu.Unlock()
	tk.pending.Store(true)
	s.ready.unserved.Add(1)
	return tk
}

// served says the request took a ready clone.
func (tk *readyTicket) served() {
	if tk.pending.CompareAndSwap(true, false) {
		tk.s.ready.unserved.Add(-1)
	}
}

// end records the request's end.
func (tk *readyTicket) end() {
	if tk.d == nil {
		return
	}
	tk.served()
	tk.s.ready.mu.Lock()
	tk.d.End(time.Now())
	tk.s.ready.mu.Unlock()
	tk.s.kickReady()
}

// dispatched records the end of a request on a ready clone: fills wait
// Settle, then the loop is kicked.
func (s *Service) dispatched() {
	if d := s.cfg.Ready.Settle; d > 0 {
		s.ready.settled.Store(time.Now().Add(d).UnixNano())
		time.AfterFunc(d, s.kickReady)
	}
	s.ready.dispatching.Add(-1)
	s.kickReady()
}

// readyFunctions finds the function of each key that has none yet; keys
// whose snapshot is gone are forgotten.
func (s *Service) readyFunctions(ctx context.Context) {
	s.ready.mu.Lock()
	var missing []poolKey
	for key := range s.ready.demand {
		if s.ready.fns[key] == nil {
			missing = append(missing, key)
		}
	}
	s.ready.mu.Unlock()
	for _, key := range missing {
		sn, err := s.GetSnapshot(ctx, key.Snapshot)
		var fn *catalog.Function
		if err == nil {
			fn, err = s.snapshotFunction(ctx, sn)
		}
		s.ready.mu.Lock()
		if err != nil {
			delete(s.ready.demand, key)
		} else if s.ready.demand[key] != nil {
			s.ready.fns[key] = fn
		}
		s.ready.mu.Unlock()
	}
}

// readyMem is what one clone of fn counts against the budgets.
func (s *Service) readyMem(fn *catalog.Function) int { return fn.MemoryMiB + s.cfg.VMMemoryOverheadMiB }

// sizeReady computes every key's share of the budget, drops the surplus
// and starts fills toward it.
func (s *Service) sizeReady(now time.Time) {
	s.readyFunctions(context.Background())
	s.ready.mu.Lock()
	keys := make([]poolKey, 0, len(s.ready.demand))
	for key := range s.ready.demand {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, func(a, b poolKey) int {
		if a.Snapshot != b.Snapshot {
			return compareStrings(a.Snapshot, b.Snapshot)
		}
		return compareStrings(string(a.Kind), string(b.Kind))
	})
	var wants []readyclones.Want[poolKey]
	for _, key := range keys {
		d, fn := s.ready.demand[key], s.ready.fns[key]
		if fn == nil {
			continue
		}
		w := d.Want(now)
		if w == 0 && d.Idle(now) && len(s.ready.clones[key]) == 0 && s.ready.filling[key] == 0 {
			delete(s.ready.demand, key) // idle for the whole window: forgotten
			delete(s.ready.fns, key)
			delete(s.ready.retryAt, key)
			continue
		}
		wants = append(wants, readyclones.Want[poolKey]{Key: key, Clones: w, Min: min(s.cfg.Ready.MinReady, w), MemMiB: s.readyMem(fn)})
	}
	alloc := readyclones.Allocate(wants, s.cfg.Ready.MemoryMiB)
	var surplus []*readyClone
	for _, w := range wants {
		list := s.ready.clones[w.Key]
		if extra := min(len(list)+s.ready.filling[w.Key]-alloc[w.Key], len(list)); extra > 0 {
			surplus = append(surplus, list[:extra]...)
		}
	}
	s.ready.mu.Unlock()
	for _, rc := range surplus {
		s.dropReady(rc, whyReadySurplus)
	}
	for _, w := range wants {
		for s.fillReadyFor(w, alloc[w.Key]) {
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// fillReadyFor starts one fill for w's key if it has fewer than want
// clones, a fill may start, nothing waits for room and no request is
// restoring; false if it started none.
func (s *Service) fillReadyFor(w readyclones.Want[poolKey], want int) bool {
	s.ready.mu.Lock()
	fn := s.ready.fns[w.Key]
	have := len(s.ready.clones[w.Key]) + s.ready.filling[w.Key]
	fills := s.ready.fills
	if fn == nil || have >= want || fills >= s.cfg.Ready.Fills || s.ready.memMiB+w.MemMiB > s.cfg.Ready.MemoryMiB ||
		s.ready.held[w.Key.Snapshot] || s.vmmPool.Restoring() > int64(fills) || s.ready.dispatching.Load() > 0 ||
		s.ready.unserved.Load() > 0 || time.Now().UnixNano() < s.ready.settled.Load() ||
		time.Now().Before(s.ready.retryAt[w.Key]) {
		s.ready.mu.Unlock()
		return false // requests restoring or on ready clones come first (each fill restores too)
	}
	release, ok := s.adm.TryAcquire(fn.Name, w.MemMiB, fn.MaxConcurrency) // never while a start waits
	if !ok {
		s.ready.mu.Unlock()
		return false
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.ready.mu.Unlock()
		release()
		return false
	}
	s.wg.Add(1) // under s.mu: Close waits only once closed is set
	s.mu.Unlock()
	s.ready.filling[w.Key]++
	s.ready.fills++
	s.ready.memMiB += w.MemMiB
	epoch := s.ready.epoch[w.Key.Snapshot]
	s.ready.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.fillReady(w.Key, w.MemMiB, epoch, release)
	}()
	return true
}

// fillReady starts one ready clone of key and adds it to the pool.
func (s *Service) fillReady(key poolKey, mem int, epoch uint64, release func()) {
	ctx := context.Background()
	t0 := time.Now()
	rc, err := s.startReadyClone(ctx, key, release)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	s.ready.mu.Lock()
	if err == nil && (closed || s.ready.epoch[key.Snapshot] != epoch) {
		// Dropped (deleted, evicted) or stopping while it started: it
		// counts as filling until it is gone, so whoever dropped waits.
		s.ready.mu.Unlock()
		s.retire(ctx, rc.lv, rc.rec, "its snapshot changed while it started")
		s.ready.mu.Lock()
		rc = nil
	}
	if s.ready.filling[key]--; s.ready.filling[key] <= 0 {
		delete(s.ready.filling, key)
	}
	s.ready.fills--
	if err != nil || rc == nil {
		s.ready.memMiB -= mem
		if errors.Is(err, ErrNotFound) {
			delete(s.ready.demand, key)
			delete(s.ready.fns, key)
		}
		if err != nil {
			s.ready.retryAt[key] = time.Now().Add(readyRetry) // a snapshot that fails to restore is not tried in a loop
		}
		s.ready.mu.Unlock()
		if err != nil {
			s.ready.m.Refill("failed")
			s.log.Warn("ready clone not started", "snapshot", key.Snapshot, "strategy", key.Kind, "err", err)
		}
		return
	}
	rc.mem, rc.since = mem, time.Now()
	rc.timer = time.AfterFunc(s.cfg.Ready.MaxAge, func() {
		s.dropReady(rc, whyReadyAged)
		s.kickReady() // recycled: the loop starts a fresh one if still wanted
	})
	s.ready.clones[key] = append(s.ready.clones[key], rc)
	s.ready.mu.Unlock()
	s.ready.m.Refill("ok")
	s.log.Debug("ready clone ready", "vm", rc.lv.id, "snapshot", key.Snapshot, "strategy", rc.rec.Strategy, "ms", ms(time.Since(t0)))
	s.kickReady() // the next fill, if wanted
}

// startReadyClone restores a clone of key (from a standby VM of the VMM
// pool if there is one), warms its agent's request path with a ping and
// records it ready.
func (s *Service) startReadyClone(ctx context.Context, key poolKey, release func()) (*readyClone, error) {
	st, err := s.readyStrategy(ctx, key)
	if err != nil {
		release()
		return nil, err
	}
	lv, rec, _, err := s.restore(ctx, key.Snapshot, restoreOpts{begin: st.Start, start: time.Now(), pool: st.Kind, admitted: release})
	if err != nil {
		return nil, err
	}
	defer lv.mu.Unlock()
	s.refillLater(poolKey{Snapshot: key.Snapshot, Kind: st.Kind}, lv.fn)
	err = s.withAgent(ctx, lv, s.cfg.BootTimeout, func(ctx context.Context) error { return warmAgent(ctx, lv) })
	if err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, "ready clone warm-up: "+err.Error())
		return nil, fmt.Errorf("%w: ready clone %s: warm-up: %v", ErrVMFailed, lv.id, err)
	}
	s.setState(ctx, lv, catalog.StateReady, "")
	rec.State = catalog.StateReady
	return &readyClone{key: key, lv: lv, rec: rec}, nil
}

// readyStrategy is the strategy a fill of key restores with: key's, or
// under auto the policy's current choice for the snapshot.
func (s *Service) readyStrategy(ctx context.Context, key poolKey) (restore.Strategy, error) {
	if key.Kind == readyAuto {
		return s.adaptive.current(ctx, key.Snapshot)
	}
	return s.strategy(string(key.Kind))
}

// readyWarmFunction is the function a ready clone's warm-up invocation
// names: no function can be called so (a colon separates a version), so
// the agent refuses it before any handler runs, having taken the invoke
// request's path up to there.
const readyWarmFunction = "thaw:warm-up"

// warmAgent runs no-op requests through a clone's agent so that TCG has
// translated its request paths before a request comes: a ping, and an
// invocation the agent refuses before the handler. No handler runs.
func warmAgent(ctx context.Context, lv *liveVM) error {
	if _, err := lv.agent.Ping(ctx); err != nil {
		return err
	}
	r, err := lv.agent.Invoke(ctx, readyWarmFunction, nil)
	switch {
	case err != nil:
		return err
	case r.OK || r.Error == nil || r.Error.Type != "FunctionNotFound":
		return fmt.Errorf("the agent did not refuse the warm-up invocation: %+v", r.Error)
	}
	return nil
}

// takeReady hands out the oldest live ready clone of key, or nil; dead
// says why a clone taken on the way was not live (it is stopped). The
// caller owns the clone (its room included) from then.
func (s *Service) takeReady(key poolKey) (rc *readyClone, dead string) {
	var gone []*readyClone
	s.ready.mu.Lock()
	for _, k := range s.readyKeysFor(key) {
		for list := s.ready.clones[k]; len(list) > 0 && rc == nil; list = s.ready.clones[k] {
			c := list[0]
			s.ready.clones[k] = list[1:]
			c.timer.Stop()
			s.ready.memMiB -= c.mem
			if _, live := s.live(c.lv.id); live && !isDone(c.lv) {
				rc = c
			} else {
				gone = append(gone, c)
			}
		}
		if rc != nil {
			break
		}
	}
	s.ready.mu.Unlock()
	for _, c := range gone {
		dead = fmt.Sprintf("ready clone %s died while waiting: %s", c.lv.id, c.lv.m.Exit().Reason)
		s.ready.m.Drop(readyDropLabel[whyReadyDied])
		s.retireFailed(c)
	}
	if len(gone) > 0 {
		s.kickReady()
	}
	return rc, dead
}

// readyKeysFor are the keys whose clones a request of key may take
// (s.ready.mu held): key's own; under auto then those of every strategy
// of its snapshot, by strategy name.
func (s *Service) readyKeysFor(key poolKey) []poolKey {
	keys := []poolKey{key}
	if key.Kind != readyAuto {
		return keys
	}
	for k, list := range s.ready.clones {
		if k.Snapshot == key.Snapshot && k != key && len(list) > 0 {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys[1:], func(a, b poolKey) int { return compareStrings(string(a.Kind), string(b.Kind)) })
	return keys
}

// retireFailed stops a ready clone found dead; its record stays, failed,
// saying why.
func (s *Service) retireFailed(rc *readyClone) {
	rc.lv.mu.Lock()
	s.stopVM(context.Background(), rc.lv, catalog.StateFailed, whyReadyDied+": "+rc.lv.m.Exit().Reason)
	rc.lv.mu.Unlock()
}

// dropReady stops a ready clone and forgets it, if it is still waiting.
func (s *Service) dropReady(rc *readyClone, why string) {
	if !s.unpoolReady(func(c *readyClone) bool { return c == rc }) {
		return
	}
	s.ready.m.Drop(readyDropLabel[why])
	s.log.Debug("ready clone stopped", "vm", rc.lv.id, "reason", why)
	s.retire(context.Background(), rc.lv, rc.rec, why)
}

// unpoolReady takes the ready clones match selects out of the pool; false
// if there were none.
func (s *Service) unpoolReady(match func(*readyClone) bool) bool {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	found := false
	for key, list := range s.ready.clones {
		kept := list[:0:0]
		for _, c := range list {
			if match(c) {
				c.timer.Stop()
				s.ready.memMiB -= c.mem
				found = true
			} else {
				kept = append(kept, c)
			}
		}
		s.ready.clones[key] = kept
	}
	return found
}

// forgetReady takes VM id out of the ready clones, if it is one (it is
// being deleted).
func (s *Service) forgetReady(id string) {
	s.unpoolReady(func(c *readyClone) bool { return c.lv.id == id })
}

// dropReadyWhere stops every ready clone match selects.
func (s *Service) dropReadyWhere(match func(*readyClone) bool, why string) {
	eachWhere(&s.ready.mu, &s.ready.clones, match, func(rc *readyClone) { s.dropReady(rc, why) })
}

// holdReady stops (or allows again) fills for snapshot id.
func (s *Service) holdReady(id string, hold bool) {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	if hold {
		s.ready.held[id] = true
	} else {
		delete(s.ready.held, id)
	}
}

// dropSnapshotReady stops snapshot id's ready clones and forgets its
// demand; clones still starting are discarded when ready, and it waits
// for them (up to the boot timeout).
func (s *Service) dropSnapshotReady(id, why string) {
	s.ready.mu.Lock()
	s.ready.epoch[id]++
	for key := range s.ready.demand {
		if key.Snapshot == id {
			delete(s.ready.demand, key)
			delete(s.ready.fns, key)
			delete(s.ready.retryAt, key)
		}
	}
	s.ready.mu.Unlock()
	s.dropReadyWhere(func(rc *readyClone) bool { return rc.key.Snapshot == id }, why)
	for deadline := time.Now().Add(s.cfg.BootTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.ready.mu.Lock()
		filling := 0
		for key, n := range s.ready.filling {
			if key.Snapshot == id {
				filling += n
			}
		}
		s.ready.mu.Unlock()
		if filling == 0 {
			return
		}
	}
}

// reclaimReady stops the oldest ready clone for why (a start needs room,
// host memory is low); false if there is none.
func (s *Service) reclaimReady(why string) bool {
	return withOldest(&s.ready.mu, &s.ready.clones, func(rc *readyClone) time.Time { return rc.since },
		func(rc *readyClone) { s.dropReady(rc, why) })
}

// readyState is what a metrics scrape reads.
func (s *Service) readyState() metrics.ReadyState {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	var st metrics.ReadyState
	now := time.Now()
	for _, list := range s.ready.clones {
		for _, rc := range list {
			st.Clones++
			st.MemoryMiB += rc.mem
			st.OldestAgeS = max(st.OldestAgeS, now.Sub(rc.since).Seconds())
		}
	}
	return st
}

// closeReady stops the clones' timers; Close stops the VMs themselves.
func (s *Service) closeReady() {
	s.ready.mu.Lock()
	defer s.ready.mu.Unlock()
	for _, list := range s.ready.clones {
		for _, rc := range list {
			rc.timer.Stop()
		}
	}
	s.ready.clones = map[poolKey][]*readyClone{}
}
