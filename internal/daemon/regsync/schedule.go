package regsync

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/progress"
)

// Gate is held shared by every cold start that names a function rather
// than a snapshot, and exclusively while an outdated copy of the function
// is removed (RefreshFunctions), so a cold start never picks a snapshot
// that is going.
func (s *Sync) Gate(name string) *sync.RWMutex {
	g, _ := s.gates.LoadOrStore(name, new(sync.RWMutex))
	return g.(*sync.RWMutex)
}

// AutoPush pushes a prepared function's warm snapshot when the node is
// configured to (Config.PushOnPrepare); a failure is logged and leaves the
// prepare's result.
func (s *Sync) AutoPush(ctx context.Context, id string) {
	if s.registry == nil || !s.cfg.PushOnPrepare {
		return
	}
	if _, err := s.PushSnapshot(progress.Sub(ctx, "push: "), id); err != nil {
		s.log.Warn("push after prepare failed; the snapshot stays local", "snapshot", id, "err", err)
	}
}

// Run runs the scheduled work until stop is closed: the registry's
// collection every GCInterval and, unless the node never imports, the
// refresh of outdated functions every RefreshInterval. Without a registry
// it returns at once.
func (s *Sync) Run(stop <-chan struct{}) {
	if s.registry == nil {
		return
	}
	var wg sync.WaitGroup
	run := func(interval time.Duration, fn func(context.Context)) {
		if interval <= 0 {
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			every(stop, interval, fn)
		}()
	}
	run(s.cfg.GCInterval, s.CollectScheduled)
	if !s.cfg.NoImport {
		run(s.cfg.RefreshInterval, s.RefreshScheduled)
	}
	wg.Wait()
}

// every runs fn every interval until stop is closed, the first time after
// a random tenth of it (so nodes started together spread their runs);
// closing stop cancels fn's context.
func every(stop <-chan struct{}, interval time.Duration, fn func(context.Context)) {
	wait := time.Duration(rand.Int64N(int64(interval)/10 + 1))
	for {
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
		wait = interval
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			select {
			case <-stop:
				cancel()
			case <-done:
			}
		}()
		fn(ctx)
		close(done)
		cancel()
	}
}
