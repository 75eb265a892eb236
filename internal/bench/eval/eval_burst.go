package eval

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
)

// burst is Figure 10: N concurrent cold invocations of one function, all
// from the same snapshot or each from its own copy of it.
//
// Before every burst the harness evicts the files of every snapshot the
// burst uses from the host page cache (itself, so that no invocation's
// eviction lands while another one is restoring), then starts all N
// requests at once. The copies come from POST /v1/snapshots/{id}/copy: the
// warm snapshot's files and strategy artifacts duplicated byte for byte, so
// the copies share no page-cache page with each other; they are deleted
// when the function's bursts are done.
func (r *evalRun) burst(ctx context.Context) error {
	maxN := slices.Max(r.cfg.BurstSizes)
	return r.perFunction(ctx, ExpBurst, r.cfg.BurstFunctions, func(ctx context.Context, fn string) error {
		return r.burstFn(ctx, fn, maxN)
	})
}

// burstFn runs every burst of one function.
func (r *evalRun) burstFn(ctx context.Context, fn string, maxN int) error {
	pr, ev, err := r.recordATestB(ctx, fn)
	if err != nil {
		return err
	}
	snaps := []*client.Snapshot{pr.Warm}
	defer func() {
		for _, s := range snaps[1:] {
			if err := r.c.DeleteSnapshot(context.WithoutCancel(ctx), s.ID); err != nil {
				r.prog.Say("%s: delete copy %s: %v", fn, s.ID, err)
			}
		}
	}()
	if slices.Contains(r.cfg.BurstModes, BurstDifferent) && maxN > 1 {
		t0 := time.Now()
		for i := 1; i < maxN; i++ {
			cp, err := r.c.CopySnapshot(ctx, pr.Warm.ID)
			if err != nil {
				return fmt.Errorf("%s: copy snapshot: %w", fn, err)
			}
			snaps = append(snaps, cp)
			if err := r.stage(ctx, cp.ID); err != nil {
				return fmt.Errorf("%s: %w", fn, err)
			}
		}
		r.prog.Done(estCopy*float64(maxN-1), "%s: %d copies of %s in %s", fn, maxN-1, pr.Warm.ID, time.Since(t0).Round(time.Millisecond))
	}
	return r.burstsOf(ctx, fn, snaps, ev)
}

func (r *evalRun) burstsOf(ctx context.Context, fn string, snaps []*client.Snapshot, ev []byte) error {
	ss := r.cfg.Strategies
	for rep := 0; rep < r.cfg.Reps; rep++ {
		for _, mode := range r.cfg.BurstModes {
			for _, n := range r.cfg.BurstSizes {
				for i := range ss {
					s := ss[(i+rep)%len(ss)]
					use := make([]*client.Snapshot, n)
					for k := range use {
						use[k] = snaps[0]
						if mode == BurstDifferent {
							use[k] = snaps[k]
						}
					}
					base := EvalSample{Experiment: ExpBurst, Record: "A", Test: "B", Burst: n, BurstMode: mode,
						StrategySample: bench.StrategySample{Function: fn, Rep: rep}}
					out, err := r.oneBurst(ctx, base, use, s, ev)
					if err != nil {
						return err
					}
					for _, smp := range out {
						r.add(smp, estCold(fn, 1)*burstFactor(n)/float64(n))
					}
				}
			}
		}
	}
	return nil
}

// oneBurst evicts the snapshots' files, then starts one cold invocation per
// snapshot at the same moment and waits for all of them.
func (r *evalRun) oneBurst(ctx context.Context, base EvalSample, snaps []*client.Snapshot, strategy string, ev []byte) ([]EvalSample, error) {
	seen := map[string]bool{}
	for _, s := range snaps {
		if !seen[s.ID] {
			seen[s.ID] = true
			if _, err := r.c.EvictSnapshot(ctx, s.ID); err != nil {
				return nil, err
			}
		}
	}
	out := make([]EvalSample, len(snaps))
	errs := make([]error, len(snaps))
	var wg sync.WaitGroup
	start := make(chan struct{})
	t0 := time.Now()
	for k, s := range snaps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			b := base
			b.Slot = k
			inv, err := r.c.InvokeSnapshot(ctx, s.ID, ev, client.InvokeOptions{Strategy: strategy, Timeout: r.cfg.Timeout})
			wall := time.Since(t0)
			switch {
			case err != nil:
				errs[k] = fmt.Errorf("%s/%s burst %d slot %d: %w", base.Function, strategy, len(snaps), k, err)
			case !inv.OK:
				errs[k] = fmt.Errorf("%s/%s burst %d slot %d: function raised %s: %s", base.Function, strategy, len(snaps), k, inv.Error.Type, inv.Error.Message)
			case inv.Strategy != strategy:
				errs[k] = fmt.Errorf("%s/%s burst %d slot %d ran as %s", base.Function, strategy, len(snaps), k, inv.Strategy)
			default:
				out[k] = fill(b, strategy, s.ID, wall, inv)
			}
		}()
	}
	close(start)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
