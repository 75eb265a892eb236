package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
)

// The daemon's side of ready clones (package pool keeps them): how one is
// restored and warmed, how a dead one is stopped.

// ReadyConfig configures ready clones (package pool).
type ReadyConfig = pool.ReadyConfig

// readyClone is a ready clone waiting for a request.
type readyClone = pool.Clone[*liveVM]

// readyTicket is a request that could take a ready clone.
type readyTicket = pool.Ticket[*liveVM]

// Why the daemon stops ready clones.
const (
	whyReadyRoom    = pool.WhyReadyRoom
	whyReadyGone    = pool.WhyReadyGone
	whyReadyEvicted = pool.WhyReadyEvicted
)

// newReady makes the ready clones' pool (open).
func (s *Service) newReady() *pool.Ready[*liveVM] {
	return pool.NewReady(s.cfg.Ready, pool.ReadyDeps[*liveVM]{
		Start: s.startReadyClone,
		Function: func(ctx context.Context, snapshot string) (*catalog.Function, error) {
			sn, err := s.GetSnapshot(ctx, snapshot)
			if err != nil {
				return nil, err
			}
			return s.versions.SnapshotFunction(ctx, sn)
		},
		Listed: s.listReady,
		Retire: func(lv *liveVM, rec *catalog.VM, why string) { s.retire(context.Background(), lv, rec, why) },
		Alive: func(lv *liveVM) bool {
			_, live := s.vms.Live(lv.ID)
			return live && !lv.Exited()
		},
		Fail: func(lv *liveVM, why string) string {
			exit := lv.M.Exit().Reason
			lv.Mu.Lock()
			s.vms.Stop(context.Background(), lv, catalog.StateFailed, why+": "+exit)
			lv.Mu.Unlock()
			return exit
		},
		Admit:       s.adm.TryAcquire,
		Restoring:   s.vmmPool.Restoring,
		Measure:     measureClone,
		Go:          s.background,
		Closed:      s.closing,
		Metrics:     s.metrics,
		Log:         s.log,
		OverheadMiB: s.cfg.VMMemoryOverheadMiB,
		BootTimeout: s.cfg.BootTimeout,
	})
}

// measureClone is a ready clone's memory in MiB: its VMM's proportional
// set size (the snapshot's page-cache pages it shares with its siblings
// divided among them), rounded up.
func measureClone(lv *liveVM) (int, error) {
	if lv.M == nil {
		return 0, fmt.Errorf("%w: vm %s has no process", ErrConflict, lv.ID)
	}
	m, err := procstat.ReadMemory(lv.M.PID())
	if err != nil {
		return 0, fmt.Errorf("measure ready clone %s: %w", lv.ID, err)
	}
	return int((m.PSSBytes + 1<<20 - 1) >> 20), nil
}

// startReady starts the sizing loop (Start), if ready clones are on.
func (s *Service) startReady() {
	if s.ready.On() {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.ready.Loop(s.stop)
		}()
	}
}

// startReadyClone restores a clone of key (from a standby VM of the VMM
// pool if there is one), warms its agent's request paths (agent.Conn.WarmUp) and
// records it ready.
func (s *Service) startReadyClone(ctx context.Context, key poolKey, release func()) (*liveVM, *catalog.VM, error) {
	st, err := s.readyStrategy(ctx, key)
	if err != nil {
		release()
		return nil, nil, err
	}
	row, err := s.snapshotRow(ctx, key.Snapshot)
	if err != nil {
		release()
		return nil, nil, err
	}
	// Its renewal skips the hook: the dispatch's runs it, once.
	lv, rec, _, err := s.restore(ctx, row, restoreOpts{begin: st.Start, start: time.Now(), pool: st.Kind, admitted: release,
		noHook: true})
	if err != nil {
		return nil, nil, err
	}
	defer lv.Mu.Unlock()
	s.refillLater(poolKey{Snapshot: key.Snapshot, Kind: st.Kind}, lv.Fn)
	err = s.vms.WithAgent(ctx, lv, s.cfg.BootTimeout, func(ctx context.Context) error { return lv.Agent.WarmUp(ctx) })
	if err != nil {
		s.vms.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, "ready clone warm-up: "+err.Error())
		return nil, nil, fmt.Errorf("%w: ready clone %s: warm-up: %v", ErrVMFailed, lv.ID, err)
	}
	rec.State = catalog.StateReady // the catalog lists it so once it is pooled (listReady)
	return lv, rec, nil
}

// listReady lists a pooled clone ready, under its lock, if no request took
// it and no drop stopped it meanwhile: the listing never shows a clone
// ready that a request could not take yet, nor one that a request runs on.
func (s *Service) listReady(lv *liveVM, pooled func() bool) {
	if !pooled() {
		return
	}
	lv.Mu.Lock()
	defer lv.Mu.Unlock()
	if pooled() {
		s.vms.SetState(context.Background(), lv, catalog.StateReady, "")
	}
}

// readyStrategy is the strategy a fill of key restores with: key's, or
// under auto the policy's current choice for the snapshot.
func (s *Service) readyStrategy(ctx context.Context, key poolKey) (restore.Strategy, error) {
	if key.Kind == pool.ReadyAuto {
		return s.adaptive.Current(ctx, key.Snapshot)
	}
	return s.strategy(string(key.Kind))
}
