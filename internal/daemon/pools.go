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
		Ready: s.reclaimReady, Idle: s.pool.StopLongestIdle, Log: s.log}.Watch(s.stop)
}

// park keeps a VM that just answered (its lock held by the caller) for its
// function's next invocation; false if the pool does not take it.
func (s *Service) park(lv *liveVM, rec *catalog.VM, snapshot string) bool {
	if !s.pool.Keeps(lv.fn) || s.secretsStale(lv) || lv.deleting.Load() {
		return false
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false
	}
	return s.pool.Park(lv, rec, lv.fn, snapshot)
}

// retire stops a VM that served cold or pooled invocations and forgets it.
func (s *Service) retire(ctx context.Context, lv *liveVM, rec *catalog.VM, why string) {
	lv.mu.Lock()
	s.stopVM(ctx, lv, catalog.StateStopped, why)
	lv.mu.Unlock()
	if err := s.db.DeleteVM(ctx, rec.ID); err != nil && !errors.Is(err, ErrNotFound) { // a delete forgot it first
		s.log.Error("forget vm", "vm", rec.ID, "err", err)
	}
}
