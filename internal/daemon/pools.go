package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
)

// The daemon's side of what is kept ahead of requests (package pool): the
// pools' dependencies, and the checks on a VM that only the daemon can make.

// kept is an idle VM of the keep-alive pool.
type kept = pool.Kept[*liveVM]

// pressureInterval is how often the pressure watch reads the host's
// memory, and hostAvailable how (tests replace both before a daemon opens).
var (
	pressureInterval = time.Second
	hostAvailable    = hostAvailableMiB
)

// newKeepAlive makes the keep-alive pool (open).
func (s *Service) newKeepAlive() *pool.KeepAlive[*liveVM] {
	return pool.NewKeepAlive(pool.KeepAliveConfig{KeepAlive: s.cfg.KeepAlive, MaxIdle: s.cfg.KeepAliveMaxIdle},
		pool.KeepAliveDeps[*liveVM]{
			Live:    func(id string) bool { _, ok := s.live(id); return ok },
			Retire:  func(lv *liveVM, rec *catalog.VM, why string) { s.retire(context.Background(), lv, rec, why) },
			Evicted: s.metrics.KeepAliveEviction,
			Log:     s.log,
		})
}

// watchPressure stops ready clones, then idle VMs, while the host's
// available memory is low (Start).
func (s *Service) watchPressure(every time.Duration) {
	defer s.wg.Done()
	pool.Pressure{Every: every, MinAvailableMiB: s.cfg.KeepAliveMinAvailableMiB, Available: s.available,
		Ready: s.ready.Reclaim, Idle: s.pool.StopLongestIdle, Log: s.log}.Watch(s.stop)
}

// park keeps a VM that just answered (its lock held by the caller) for its
// function's next invocation; false if the pool does not take it.
func (s *Service) park(lv *liveVM, rec *catalog.VM, snapshot string) bool {
	if !s.pool.Keeps(lv.Fn) || s.functions.SecretsStale(lv.SecretDigests) || lv.Deleting.Load() {
		return false
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false
	}
	return s.pool.Park(lv, rec, lv.Fn, snapshot)
}

// retire stops a VM that served cold or pooled invocations and forgets it.
func (s *Service) retire(ctx context.Context, lv *liveVM, rec *catalog.VM, why string) {
	lv.Mu.Lock()
	s.stopVM(ctx, lv, catalog.StateStopped, why)
	lv.Mu.Unlock()
	if err := s.db.DeleteVM(ctx, rec.ID); err != nil && !errors.Is(err, ErrNotFound) { // a delete forgot it first
		s.log.Error("forget vm", "vm", rec.ID, "err", err)
	}
}

// poolKey names what a standby VM or a ready clone was prepared for.
type poolKey = pool.Key

// standby is a VM of the VMM pool, its restore planned.
type standby = pool.Standby[*liveVM, *coldStart]

// Why the daemon stops standby VMs.
const (
	whyStandbyGone  = pool.WhyStandbyGone
	whyStandbyEvict = pool.WhyStandbyEvict
	whyStandbyStore = pool.WhyStandbyStore
)

// newVMMPool makes the VMM pool (open).
func (s *Service) newVMMPool() *pool.VMMPool[*liveVM, *coldStart] {
	cfg := pool.VMMPoolConfig{Size: s.cfg.VMMPool, TTL: s.cfg.VMMPoolTTL, MemoryMiB: s.cfg.VMMPoolMemoryMiB,
		OverheadMiB: s.cfg.VMMemoryOverheadMiB, BootTimeout: s.cfg.BootTimeout}
	return pool.NewVMMPool(cfg, pool.VMMPoolDeps[*liveVM, *coldStart]{
		Start: s.startStandby,
		Enlist: func(lv *liveVM, join func()) {
			lv.Mu.Lock()
			join()
			s.setState(context.Background(), lv, catalog.StateStandby, "")
			lv.Mu.Unlock()
		},
		Retire:  func(lv *liveVM, rec *catalog.VM, why string) { s.retire(context.Background(), lv, rec, why) },
		Live:    func(id string) bool { _, ok := s.live(id); return ok },
		Admit:   s.adm.TryAcquire,
		Go:      s.background,
		Closed:  s.closing,
		Dropped: s.metrics.VMMPoolDrop,
		Log:     s.log,
	})
}

// background runs f in a goroutine Close waits for; false if the daemon
// is closing (f does not run).
func (s *Service) background(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1) // under s.mu: Close waits only once closed is set
	go func() {
		defer s.wg.Done()
		f()
	}()
	return true
}

// closing says whether Close has begun.
func (s *Service) closing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// startStandby plans a restore of key, starts its VMM and runs the
// strategy up to the point where the device state is due.
func (s *Service) startStandby(ctx context.Context, key poolKey, release func()) (*liveVM, *catalog.VM, *coldStart, error) {
	return s.restorer.StartStandby(ctx, key.Snapshot, key.Kind, release)
}

// forgetPooled takes VM id out of whichever pool holds it (VMM pool,
// ready clones, keep-alive) before it is deleted: its room and its timer
// go with it.
func (s *Service) forgetPooled(id string) {
	s.vmmPool.Forget(id)
	s.ready.Forget(id)
	s.pool.Forget(id)
}

// holdPool stops (or allows again) fills for snapshot id.
func (s *Service) holdPool(id string, hold bool) {
	s.ready.Hold(id, hold)
	s.vmmPool.Hold(id, hold)
}

// dropSnapshotStandby stops snapshot id's ready clones and the standby VMs
// that match (nil: all of them), waiting for those still starting.
func (s *Service) dropSnapshotStandby(id string, match func(*standby) bool, why string) {
	if why == whyStandbyGone { // its ready clones go too
		s.ready.DropSnapshot(id, whyReadyGone)
	} else {
		s.ready.DropSnapshot(id, whyReadyEvicted)
	}
	s.vmmPool.DropSnapshot(id, match, why)
}
