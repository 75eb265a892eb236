package daemon

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/daemon/restorer"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"go.opentelemetry.io/otel/attribute"
)

// The restore of a clone is package restorer's: verify, plan, start the
// VMM or take a standby VM, load the device state, resume, renew, and
// strict restores. The daemon wires it and answers for it.

// RestoreTiming breaks a restore down, in milliseconds.
type RestoreTiming = restorer.Timing

// coldStart is a restore planned but not started (a standby VM's plan).
type coldStart = restorer.Plan

// restoreOpts says how to restore (restorer.Opts).
type restoreOpts struct {
	begin     restore.BeginFunc
	start     time.Time
	pool      restore.Kind
	noSecrets bool
	noHook    bool
	strict    bool
	admitted  func()
}

func (o restoreOpts) opts() restorer.Opts {
	return restorer.Opts{Begin: o.begin, Start: o.start, Pool: o.pool, NoSecrets: o.noSecrets, NoHook: o.noHook,
		Strict: o.strict, Admitted: o.admitted}
}

// newRestorer makes the restore component (open).
func (s *Service) newRestorer() *restorer.Restorer[*liveVM] {
	return restorer.New(restorer.Config{BootTimeout: s.cfg.BootTimeout, HugePages: s.cfg.HugePageHint,
		MemorySource: s.cfg.MemorySource,
	}, restorer.Deps[*liveVM]{Log: s.log, Catalog: s.db, VMs: s.vms, Pool: restorePool{s}, Registry: restoreRegistry{s},
		Strategies: func() []restore.Strategy { return s.strategies },
		Admit:      s.admit,
		Row: func(ctx context.Context, id string) (restorer.Row, error) {
			row, err := s.snapshotRow(ctx, id)
			return restorer.Row(row), err
		},
		Verify: func(ctx context.Context, row restorer.Row) (restorer.Row, *snapshot.Manifest, error) {
			v, err := s.verifiedRow(ctx, snapshotRow(row), false)
			if err != nil {
				return restorer.Row{}, nil, err
			}
			return restorer.Row{Sn: v.Sn, Fn: v.Fn}, v.M, nil
		},
		Pin: s.pins.begin, Loaders: s.loaders, Store: func() *store.Store { return s.snaps.Store() },
		SecretEnv: s.functions.SecretEnv, Trace: s.traceOf, PoolHit: s.metrics.VMMPool, Spans: restoreSpans{s}})
}

// restorePool is the VMM pool as the restorer sees it.
type restorePool struct{ s *Service }

func (p restorePool) BeginRestore() func()          { return p.s.vmmPool.BeginRestore() }
func (p restorePool) Size(fn *catalog.Function) int { return p.s.vmmPool.Size(fn) }

func (p restorePool) Take(snapshot string, kind restore.Kind) (*liveVM, *catalog.VM, *coldStart, bool) {
	if sb := p.s.vmmPool.Take(poolKey{Snapshot: snapshot, Kind: kind}); sb != nil {
		return sb.VM, sb.Rec, sb.Plan, true
	}
	return nil, nil, nil, false
}

func (p restorePool) Refill(snapshot string, kind restore.Kind, fn *catalog.Function) {
	p.s.vmmPool.Refill(poolKey{Snapshot: snapshot, Kind: kind}, fn)
}

func (p restorePool) Retire(ctx context.Context, lv *liveVM, rec *catalog.VM, why string) {
	p.s.retire(ctx, lv, rec, why)
}

// restoreRegistry is the registry's side of lazy snapshots for the restorer.
type restoreRegistry struct{ s *Service }

func (r restoreRegistry) BeginLazy(ctx context.Context, sn *catalog.Snapshot, begin restore.BeginFunc, snap restore.Snapshot,
	env restore.Env) (restore.Session, *catalog.Snapshot, time.Duration, error) {
	return r.s.reg.BeginLazy(ctx, sn, begin, snap, env)
}
func (restoreRegistry) Lazy(sess restore.Session) bool { return regsync.LazyOf(sess) != nil }
func (restoreRegistry) Failure(sess restore.Session, vm string) error {
	return regsync.LazyOf(sess).Failure(vm)
}

// restoreSpans makes the restorer's spans.
type restoreSpans struct{ s *Service }

var restoreSteps = [...]string{restorer.StepVMMStart: SpanVMMStart, restorer.StepStateLoad: SpanStateLoad,
	restorer.StepResume: SpanResume}

func (t restoreSpans) Strategy(ctx context.Context, vm, function, snapshot string) (context.Context, func(string, error)) {
	ctx, sp := t.s.span(ctx, SpanStrategy, AttrVM.String(vm), AttrFunction.String(function), AttrSnapshot.String(snapshot))
	return ctx, func(strategy string, err error) {
		if strategy != "" {
			sp.SetAttributes(AttrStrategy.String(strategy))
		}
		endSpan(sp, err)
	}
}

func (t restoreSpans) Step(ctx context.Context, step restorer.Step, a restorer.Attrs) (context.Context, func(error)) {
	attrs := []attribute.KeyValue{AttrVM.String(a.VM), AttrFunction.String(a.Function), AttrSnapshot.String(a.Snapshot),
		AttrStrategy.String(a.Strategy)}
	if a.VMM != "" {
		attrs = append(attrs, AttrVMM.String(a.VMM))
	}
	ctx, sp := t.s.span(ctx, restoreSteps[step], attrs...)
	return ctx, func(err error) { endSpan(sp, err) }
}

// RestoreVM starts a VM from a snapshot with a restore strategy and waits
// until its agent answers. The VM keeps running until deleted.
func (s *Service) RestoreVM(ctx context.Context, snapID, strategy string) (*catalog.VM, *RestoreTiming, error) {
	return s.restorer.RestoreVM(ctx, snapID, strategy)
}

// Forwarders to the restorer for the rest of the daemon.

func (s *Service) strategy(name string) (restore.Strategy, error) { return s.restorer.Strategy(name) }

// restoreOf restores from a snapshot whose row was read already.
func (s *Service) restoreOf(ctx context.Context, sn *catalog.Snapshot, o restoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	row, err := s.rowOf(ctx, sn)
	if err != nil {
		return nil, nil, nil, err
	}
	return s.restore(ctx, row, o)
}

func (s *Service) restore(ctx context.Context, row snapshotRow, o restoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	return s.restorer.Restore(ctx, restorer.Row(row), o.opts())
}

func (s *Service) refillLater(key poolKey, fn *catalog.Function) {
	s.restorer.RefillLater(key.Snapshot, key.Kind, fn)
}

func (s *Service) renewal(lv *liveVM, withSecrets bool) (agent.Renewal, error) {
	return s.restorer.Renewal(lv, withSecrets)
}

func (s *Service) renewed(lv *liveVM, r *agent.Reply) { s.restorer.Renewed(lv, r) }

// strictly makes o a strict restore (restorer.Strict).
func strictly(o restoreOpts) restoreOpts {
	o.begin, o.strict = restorer.Strict(restorer.Opts{Begin: o.begin}).Begin, true
	return o
}

func refusedFallback(err error) error { return restorer.RefusedFallback(err) }
