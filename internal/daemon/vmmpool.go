package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/restore"
)

// The VMM pool: VMM processes started ahead of restores, one set per
// snapshot and strategy. A standby VM has been planned (snapshot verified,
// the strategy's session begun) and its QEMU started with -incoming defer:
// guest memory is laid out by the interposer and, for REAP, the working set
// is installed; only the device state, the resume and the clone's renewal
// are left for the restore. A restore of that snapshot and strategy takes
// a standby VM when there is one and starts a new VMM otherwise; either
// way the pool is refilled in the background, up to the function's size,
// within the pool's memory budget and the host's admission budget. A
// standby VM unused for its time-to-live is stopped, and standby VMs are
// the first to give way when a start needs room.

// poolKey names what a standby VM was prepared for.
type poolKey struct {
	snapshot string
	kind     restore.Kind
}

// standby is a VM of the pool, waiting for a restore.
type standby struct {
	key   poolKey
	lv    *liveVM
	rec   *catalog.VM
	c     *coldStart
	mem   int // MiB counted against the pool's budget
	since time.Time
	timer *time.Timer
}

type vmmPool struct {
	mu      sync.Mutex
	ready   map[poolKey][]*standby // oldest first
	filling map[poolKey]int        // fills under way
	memMiB  int                    // of ready and filling VMs
	// epoch counts, per snapshot, the times its standby VMs were dropped
	// (evicted, stored, deleted): a fill begun before a drop is discarded.
	epoch map[string]uint64
	// held are snapshots being deleted: no fill starts for them.
	held map[string]bool
	// restoring counts restores under way; fills wait for them (up to
	// fillPatience), so a burst's guests do not share the CPUs with VMM
	// starts for the next one.
	restoring atomic.Int64
}

// fillPatience is how long a refill waits for restores under way to end.
var fillPatience = 2 * time.Second

// Why standby VMs are stopped.
const (
	whyStandbyExpired = "standby time over"
	whyStandbyRoom    = "room needed for another VM"
	whyStandbyGone    = "its snapshot or function deleted"
	whyStandbyEvict   = "snapshot evicted from the page cache"
	whyStandbyStore   = "snapshot stored in or removed from the memory store"
)

// poolSize is how many standby VMs fn keeps per snapshot and strategy.
func (s *Service) poolSize(fn *catalog.Function) int {
	switch {
	case fn.VMMPool < 0:
		return 0
	case fn.VMMPool > 0:
		return fn.VMMPool
	}
	return s.cfg.VMMPool
}

// poolTTL is how long fn's standby VMs wait for a restore.
func (s *Service) poolTTL(fn *catalog.Function) time.Duration {
	if fn.VMMPoolTTLS > 0 {
		return time.Duration(fn.VMMPoolTTLS) * time.Second
	}
	return s.cfg.VMMPoolTTL
}

// takeStandby hands out the oldest standby VM for key, or nil; the
// caller owns it from then (its room in admission included).
func (s *Service) takeStandby(key poolKey) *standby {
	s.vmmPool.mu.Lock()
	defer s.vmmPool.mu.Unlock()
	for list := s.vmmPool.ready[key]; len(list) > 0; list = s.vmmPool.ready[key] {
		sb := list[0]
		s.vmmPool.ready[key] = list[1:]
		sb.timer.Stop()
		s.vmmPool.memMiB -= sb.mem
		if _, live := s.live(sb.lv.id); live {
			return sb
		}
	}
	return nil
}

// refill starts standby VMs for key in the background until the pool
// holds fn's size of them, as far as the budgets allow.
func (s *Service) refill(key poolKey, fn *catalog.Function) {
	want := s.poolSize(fn)
	mem := fn.MemoryMiB + s.cfg.VMMemoryOverheadMiB
	for deadline := time.Now().Add(fillPatience); s.vmmPool.restoring.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		s.vmmPool.mu.Lock()
		have := len(s.vmmPool.ready[key]) + s.vmmPool.filling[key]
		if have >= want || s.vmmPool.memMiB+mem > s.cfg.VMMPoolMemoryMiB || s.vmmPool.held[key.snapshot] {
			s.vmmPool.mu.Unlock()
			return
		}
		release, ok := s.adm.TryAcquire(fn.Name, mem, fn.MaxConcurrency)
		if !ok {
			s.vmmPool.mu.Unlock()
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			s.vmmPool.mu.Unlock()
			release()
			return
		}
		s.wg.Add(1) // under s.mu: Close waits only once closed is set
		s.mu.Unlock()
		s.vmmPool.filling[key]++
		s.vmmPool.memMiB += mem
		epoch := s.vmmPool.epoch[key.snapshot]
		s.vmmPool.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.fillStandby(key, fn, mem, epoch, release)
		}()
	}
}

// fillStandby starts one standby VM for key.
func (s *Service) fillStandby(key poolKey, fn *catalog.Function, mem int, epoch uint64, release func()) {
	ctx := context.Background()
	t0 := time.Now()
	sb, err := s.startStandby(ctx, key, release)
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if err == nil && closed { // Close may have listed the live VMs before this one
		s.retire(context.Background(), sb.lv, sb.rec, "daemon stopped")
		err = errors.New("daemon stopped")
	}
	s.vmmPool.mu.Lock()
	if err == nil && s.vmmPool.epoch[key.snapshot] != epoch {
		// Its snapshot was evicted, stored or deleted while it started. It
		// still counts as filling until it is gone: whoever dropped the
		// snapshot's VMs waits for that.
		s.vmmPool.mu.Unlock()
		s.retire(ctx, sb.lv, sb.rec, "its snapshot changed while it started")
		s.vmmPool.mu.Lock()
		err = nil
		sb = nil
	}
	// The check above, joining the pool and leaving the fills happen under
	// one hold of the lock, so a drop either sees it filling or ready.
	s.vmmPool.filling[key]--
	if s.vmmPool.filling[key] <= 0 {
		delete(s.vmmPool.filling, key)
	}
	if err != nil || sb == nil {
		s.vmmPool.memMiB -= mem
		s.vmmPool.mu.Unlock()
		if err != nil {
			s.log.Warn("vmm pool: standby vm not started", "snapshot", key.snapshot, "strategy", key.kind, "err", err)
		}
		return
	}
	sb.mem, sb.since = mem, time.Now()
	sb.timer = time.AfterFunc(s.poolTTL(fn), func() { s.dropStandby(sb, whyStandbyExpired) })
	// The VM's lock is held until the catalog says standby, so a restore
	// that takes it at once finds it recorded so, and records it running.
	sb.lv.mu.Lock()
	s.vmmPool.ready[key] = append(s.vmmPool.ready[key], sb)
	s.vmmPool.mu.Unlock()
	s.setState(ctx, sb.lv, catalog.StateStandby, "")
	sb.lv.mu.Unlock()
	s.log.Debug("vmm pool: standby vm ready", "vm", sb.lv.id, "snapshot", key.snapshot, "strategy", key.kind,
		"start_ms", ms(time.Since(t0)))
}

// startStandby plans a restore of key, starts its VMM and runs the
// strategy up to the point where the device state is due.
func (s *Service) startStandby(ctx context.Context, key poolKey, release func()) (*standby, error) {
	st, err := s.strategy(string(key.kind))
	if err != nil {
		release()
		return nil, err
	}
	c, err := s.planRestore(ctx, key.snapshot, restoreOpts{begin: st.Start, start: time.Now()})
	if err != nil {
		release()
		return nil, err
	}
	rec := &catalog.VM{ID: c.spec.ID, Function: c.fn.Name, Snapshot: c.sn.ID, Strategy: string(c.sess.Kind()), Version: c.sn.Version}
	started := time.Now()
	lv, err := s.startVM(ctx, rec, c.spec, c.fn, release)
	if err != nil {
		c.sess.Close()
		return nil, err
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	lv.sess = c.sess
	if err := s.startClone(ctx, lv, c, started); err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, fmt.Sprintf("standby for %s: %v", key.snapshot, err))
		return nil, err
	}
	return &standby{key: key, lv: lv, rec: rec, c: c}, nil
}

// dropStandby stops a standby VM and forgets it, if it is still in the
// pool.
func (s *Service) dropStandby(sb *standby, why string) {
	s.vmmPool.mu.Lock()
	list := s.vmmPool.ready[sb.key]
	found := false
	for i, q := range list {
		if q == sb {
			s.vmmPool.ready[sb.key] = append(list[:i:i], list[i+1:]...)
			s.vmmPool.memMiB -= sb.mem
			sb.timer.Stop()
			found = true
			break
		}
	}
	s.vmmPool.mu.Unlock()
	if !found {
		return
	}
	s.metrics.VMMPoolDrop(why)
	s.log.Debug("vmm pool: standby vm stopped", "vm", sb.lv.id, "reason", why)
	s.retire(context.Background(), sb.lv, sb.rec, why)
}

// forgetPooled takes VM id out of the VMM pool or the keep-alive pool, if
// it is in one, before it is deleted: its room and its timer go with it.
func (s *Service) forgetPooled(id string) {
	s.vmmPool.mu.Lock()
	for key, list := range s.vmmPool.ready {
		for i, sb := range list {
			if sb.lv.id == id {
				s.vmmPool.ready[key] = append(list[:i:i], list[i+1:]...)
				s.vmmPool.memMiB -= sb.mem
				sb.timer.Stop()
			}
		}
	}
	s.vmmPool.mu.Unlock()
	s.forgetReady(id)
	s.pool.Forget(id)
}

// holdPool stops (or allows again) fills for snapshot id.
func (s *Service) holdPool(id string, hold bool) {
	s.holdReady(id, hold)
	s.vmmPool.mu.Lock()
	defer s.vmmPool.mu.Unlock()
	if hold {
		s.vmmPool.held[id] = true
	} else {
		delete(s.vmmPool.held, id)
	}
}

// dropSnapshotStandby stops the standby VMs of snapshot id that match
// (nil: all of them). Those still starting are discarded when ready, and
// it waits for them (up to the boot timeout): the caller is about to
// delete, evict or replace what they map.
func (s *Service) dropSnapshotStandby(id string, match func(*standby) bool, why string) {
	if why == whyStandbyGone { // its ready clones go too
		s.dropSnapshotReady(id, whyReadyGone)
	} else {
		s.dropSnapshotReady(id, whyReadyEvicted)
	}
	s.vmmPool.mu.Lock()
	s.vmmPool.epoch[id]++
	s.vmmPool.mu.Unlock()
	s.dropStandbyWhere(func(sb *standby) bool { return sb.key.snapshot == id && (match == nil || match(sb)) }, why)
	for deadline := time.Now().Add(s.cfg.BootTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		s.vmmPool.mu.Lock()
		filling := 0
		for key, n := range s.vmmPool.filling {
			if key.snapshot == id {
				filling += n
			}
		}
		s.vmmPool.mu.Unlock()
		if filling == 0 {
			return
		}
	}
}

// dropStandbyWhere stops every standby VM match selects.
func (s *Service) dropStandbyWhere(match func(*standby) bool, why string) {
	eachWhere(&s.vmmPool.mu, &s.vmmPool.ready, match, func(sb *standby) { s.dropStandby(sb, why) })
}

// reclaimStandby stops the oldest standby VM to make room for a start;
// false if there is none.
func (s *Service) reclaimStandby() bool {
	return withOldest(&s.vmmPool.mu, &s.vmmPool.ready, func(sb *standby) time.Time { return sb.since },
		func(sb *standby) { s.dropStandby(sb, whyStandbyRoom) })
}

// standbyVMs counts the pool's standby VMs.
func (s *Service) standbyVMs() int { return count(&s.vmmPool.mu, &s.vmmPool.ready) }

// closeVMMPool stops the pool's timers; Close stops the VMs themselves.
func (s *Service) closeVMMPool() {
	s.vmmPool.mu.Lock()
	defer s.vmmPool.mu.Unlock()
	for _, list := range s.vmmPool.ready {
		for _, sb := range list {
			sb.timer.Stop()
		}
	}
	s.vmmPool.ready = map[poolKey][]*standby{}
}
