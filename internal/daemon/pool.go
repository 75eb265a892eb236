package daemon

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// The keep-alive pool: after a cold invocation the VM is kept, idle, for
// the function's keep-alive time, and the function's next invocations that
// name no snapshot or strategy run on it warm ("pooled"), as Lambda reuses
// execution environments. A function keeps at most KeepAliveMaxIdle idle
// VMs; a VM idle for its keep-alive time is stopped, and so is the oldest
// idle VM when a start does not fit the host's budget (admission reclaims
// it) or the host's available memory runs low (watchPressure). A function
// with keep_alive_s -1 opts out: every invocation starts
// from a fresh snapshot.

// kept is an idle VM of the pool.
type kept struct {
	lv       *liveVM
	rec      *catalog.VM
	snapshot string // restored from
	since    time.Time
	timer    *time.Timer
}

type pool struct {
	mu   sync.Mutex
	idle map[string][]*kept // by function, most recently used last
}

// keepAlive is how long fn's VMs are kept idle; 0: not at all.
func (s *Service) keepAlive(fn *catalog.Function) time.Duration {
	switch {
	case fn.KeepAliveS < 0:
		return 0
	case fn.KeepAliveS > 0:
		return time.Duration(fn.KeepAliveS) * time.Second
	}
	return s.cfg.KeepAlive
}

// park keeps a VM that just answered (its lock held by the caller) for its
// function's next invocation; false if the pool does not take it.
func (s *Service) park(lv *liveVM, rec *catalog.VM, snapshot string) bool {
	ttl := s.keepAlive(lv.fn)
	if ttl <= 0 || s.cfg.KeepAliveMaxIdle <= 0 || s.functions.SecretsStale(lv.secretDigests) || lv.deleting.Load() {
		return false
	}
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return false
	}
	k := &kept{lv: lv, rec: rec, snapshot: snapshot, since: time.Now()}
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	if len(s.pool.idle[lv.fn.Name]) >= s.cfg.KeepAliveMaxIdle {
		return false
	}
	k.timer = time.AfterFunc(ttl, func() { s.evictKept(k, whyExpired) })
	s.pool.idle[lv.fn.Name] = append(s.pool.idle[lv.fn.Name], k)
	return true
}

// takeKept hands out the most recently used idle VM of function restored
// from snapshot, or nil; the caller owns it (and must lock it) from then.
func (s *Service) takeKept(function, snapshot string) *kept {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	list := s.pool.idle[function]
	for i := len(list) - 1; i >= 0; i-- {
		k := list[i]
		if k.snapshot != snapshot {
			continue
		}
		s.pool.idle[function] = append(list[:i:i], list[i+1:]...)
		k.timer.Stop()
		if _, live := s.live(k.lv.id); live {
			return k
		}
	}
	return nil
}

// unpark removes k from the pool; false if it was not there (taken or
// evicted already).
func (s *Service) unpark(k *kept) bool {
	s.pool.mu.Lock()
	defer s.pool.mu.Unlock()
	list := s.pool.idle[k.lv.fn.Name]
	for i, q := range list {
		if q == k {
			s.pool.idle[k.lv.fn.Name] = append(list[:i:i], list[i+1:]...)
			k.timer.Stop()
			return true
		}
	}
	return false
}

// Why idle VMs are stopped, and the metric label of each.
const (
	whyExpired  = "keep-alive time over"
	whyRoom     = "room needed for another VM"
	whyPressure = "host memory low"
)

var evictionLabel = map[string]string{whyExpired: "expired", whyRoom: "room", whyPressure: "memory_pressure",
	"function deleted": "deleted", "snapshot deleted": "deleted", whySecretChanged: "secret_changed"}

// evictKept stops an idle VM and forgets it.
func (s *Service) evictKept(k *kept, why string) {
	if !s.unpark(k) {
		return
	}
	label, ok := evictionLabel[why]
	if !ok {
		label = "other"
	}
	s.metrics.KeepAliveEviction(label)
	s.log.Info("idle vm stopped", "vm", k.lv.id, "function", k.lv.fn.Name, "reason", why)
	s.retire(context.Background(), k.lv, k.rec, why)
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

// evictKeptWhere stops every idle VM match selects.
func (s *Service) evictKeptWhere(match func(*kept) bool, why string) {
	eachWhere(&s.pool.mu, &s.pool.idle, match, func(k *kept) { s.evictKept(k, why) })
}

// reclaimIdle stops the longest-idle VM of the pool to make room for a
// start; false if none is idle.
func (s *Service) reclaimIdle() bool { return s.stopLongestIdle(whyRoom) }

// stopLongestIdle stops the VM idle longest; false if none is idle.
func (s *Service) stopLongestIdle(why string) bool {
	return withOldest(&s.pool.mu, &s.pool.idle, func(k *kept) time.Time { return k.since }, func(k *kept) { s.evictKept(k, why) })
}

// idleVMs counts the pool's idle VMs.
func (s *Service) idleVMs() int { return count(&s.pool.mu, &s.pool.idle) }

// pressureInterval is how often watchPressure reads the host's memory,
// and hostAvailable how (tests replace both before a daemon opens).
var (
	pressureInterval = time.Second
	hostAvailable    = hostAvailableMiB
)

// watchPressure stops idle VMs, the longest idle first, while the host's
// available memory is below KeepAliveMinAvailableMiB: kept VMs are a
// cache, and a host short of memory needs it more than a warm start does.
// One VM goes per reading, so the next reading sees what it freed.
func (s *Service) watchPressure(every time.Duration) {
	defer s.wg.Done()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-tick.C:
		}
		avail, ok := s.available()
		if !ok || avail >= s.cfg.KeepAliveMinAvailableMiB {
			continue
		}
		if s.reclaimReady(whyPressure) { // ready clones go before kept VMs
			s.log.Warn("host memory low: stopped the oldest ready clone", "available_mib", avail,
				"min_available_mib", s.cfg.KeepAliveMinAvailableMiB)
		} else if s.stopLongestIdle(whyPressure) {
			s.log.Warn("host memory low: stopped the longest idle vm", "available_mib", avail,
				"min_available_mib", s.cfg.KeepAliveMinAvailableMiB)
		}
	}
}
