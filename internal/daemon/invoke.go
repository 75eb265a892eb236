package daemon

import (
	"context"
	"encoding/json"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/attribute"
)

// The invocation paths are package invoke's: warm invocations, the cold
// path (a ready clone, a kept VM, else a restore) and their failures. The
// daemon wires it and answers for it.

// MaxEventBytes bounds an invocation's event (Lambda's synchronous limit).
const MaxEventBytes = invoke.MaxEventBytes

// Invocation is the outcome of one invocation, as the API returns it.
type Invocation = wire.Invocation

// Timing breaks an invocation down, in milliseconds.
type Timing = wire.Timing

// InvokeRequest asks for one invocation; ColdRequest for the cold-start
// path (package invoke).
type (
	InvokeRequest = invoke.InvokeRequest
	ColdRequest   = invoke.ColdRequest
)

// Error types of the invocations recorded after a platform failure
// (package history).
const (
	ErrorTypeTimeout  = history.ErrorTypeTimeout
	ErrorTypeVMFailed = history.ErrorTypeVMFailed
)

// newInvoker makes the invocation component (last in open: it reaches
// every other).
func (s *Service) newInvoker() *invoke.Invoker {
	c := s.cfg
	return invoke.New(invoke.Config{InvokeTimeout: c.InvokeTimeout, BootTimeout: c.BootTimeout, RemoteStrategy: c.RemoteStrategy},
		invoke.Deps{Log: s.log, Catalog: s.db, VMs: s.vms, Tracing: invokeSpans{s}, Ready: readyRequests{s},
			Restore: invoke.Restorer{Strategy: s.strategy, Restore: s.restoreCold, RefusedFallback: refusedFallback,
				RefillLater: func(snapshot string, kind restore.Kind, fn *catalog.Function) {
					s.refillLater(poolKey{Snapshot: snapshot, Kind: kind}, fn)
				},
				Renewal: s.renewal, Renewed: s.renewed},
			Cold: invoke.Cold{ParseRef: ParseRef, Gate: s.fnGate,
				Resolve: func(ctx context.Context, ref versions.Ref) (invoke.Target, error) {
					t, err := s.versions.Resolve(ctx, ref)
					return invoke.Target(t), err
				},
				NewestSnapshotOf: s.versions.NewestSnapshotOf, StaleNote: s.staleNote,
				InvokeBooted: func(ctx context.Context, function string, t invoke.Target, event json.RawMessage, timeout time.Duration,
					start time.Time, why string) (*Invocation, error) {
					return s.invokeBooted(ctx, function, Target(t), event, timeout, start, why)
				},
				Import: s.reg.ImportOnInvoke, GetSnapshot: s.GetSnapshot, Evict: s.evictSnapshot, Adaptive: coldAdaptive{s}},
			Faults:      func() *faulttrace.Tracer { return s.faults },
			LazyFailure: func(lv *liveVM) error { return regsync.LazyOf(lv.Sess).Failure(lv.ID) },
			Logs:        invocationLogs, Record: s.record, RecordFailure: s.history.RecordFailure,
			Park: s.park, Retire: s.retire, TakeKept: s.takeKept, Hold: s.hold})
}

// restoreCold restores a cold start's VM as package invoke asks.
func (s *Service) restoreCold(ctx context.Context, sn *catalog.Snapshot, o invoke.RestoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	ro := restoreOpts{begin: o.Begin, start: o.Start, pool: o.Pool}
	if o.Strict {
		ro = strictly(ro)
	}
	return s.restoreOf(ctx, sn, ro)
}

// takeKept takes an idle VM of the keep-alive pool for an invocation.
func (s *Service) takeKept(function, snapshot string) *invoke.Kept {
	k := s.pool.Take(function, snapshot)
	s.metrics.KeepAlive(k != nil)
	if k == nil {
		return nil
	}
	return &invoke.Kept{VM: k.VM, Rec: k.Rec, Snapshot: k.Snapshot}
}

// hold keeps Close waiting until release is called; false if the daemon
// is closing.
func (s *Service) hold() (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, false
	}
	s.wg.Add(1) // under s.mu: Close waits only once closed is set
	return s.wg.Done, true
}

// InvokeVM invokes the function on a running VM (a warm invocation).
func (s *Service) InvokeVM(ctx context.Context, vmID string, req InvokeRequest) (*Invocation, error) {
	return s.invoker.InvokeVM(ctx, vmID, req)
}

// InvokeCold restores a fresh VM from a snapshot, invokes it once and tears
// it down, returning the restore and invocation breakdown.
func (s *Service) InvokeCold(ctx context.Context, req ColdRequest) (*Invocation, error) {
	return s.invoker.InvokeCold(ctx, req)
}

// Forwarders to the invocation component for the rest of the daemon.

func (s *Service) timeout(d time.Duration) (time.Duration, error) { return s.invoker.Timeout(d) }

func checkEvent(ev json.RawMessage) error { return invoke.CheckEvent(ev) }

func (s *Service) invokeLocked(ctx context.Context, lv *liveVM, inv *Invocation, event json.RawMessage, timeout time.Duration) error {
	return s.invoker.Locked(ctx, lv, inv, event, timeout)
}

func (s *Service) invokeFailed(ctx context.Context, inv *Invocation, start time.Time, err error) error {
	return s.history.RecordFailure(ctx, inv, start, err)
}

func (s *Service) traceOf(pid int) faulttrace.Counters { return s.invoker.TraceOf(pid) }

func exitsWithin(lv *liveVM, d time.Duration) bool { return invoke.ExitsWithin(lv, d) }

func isDone(lv *liveVM) bool { return lv.Exited() }

func readyNoteOf(ctx context.Context) *wire.ReadyNote { return invoke.ReadyNoteOf(ctx) }

// invokeSpans makes the invocations' spans.
type invokeSpans struct{ s *Service }

func (t invokeSpans) Invoke(ctx context.Context, inv *Invocation) (context.Context, func(error)) {
	ctx, sp := t.s.span(ctx, SpanInvoke, invocationAttrs(inv)...)
	return ctx, func(err error) {
		if err == nil {
			sp.SetAttributes(AttrInvocationOK.Bool(inv.OK))
		}
		endSpan(sp, err)
	}
}

func (invokeSpans) Annotate(ctx context.Context, inv *Invocation) {
	annotate(ctx, invocationAttrs(inv)...)
}

func (invokeSpans) AnnotateCold(ctx context.Context, snapshot, function string) {
	annotate(ctx, AttrSnapshot.String(snapshot))
	if function != "" {
		annotate(ctx, AttrFunction.String(function))
	}
}

// invocationAttrs describe an invocation on its spans.
func invocationAttrs(inv *Invocation) []attribute.KeyValue {
	attrs := []attribute.KeyValue{AttrFunction.String(inv.Function), AttrVM.String(inv.VM), AttrMode.String(inv.Mode),
		AttrInvocation.String(inv.ID)}
	if inv.Snapshot != "" {
		attrs = append(attrs, AttrSnapshot.String(inv.Snapshot), AttrStrategy.String(inv.Strategy))
	}
	return attrs
}

// readyRequests are the ready clones as requests take them.
type readyRequests struct{ s *Service }

func (r readyRequests) On() bool                                { return r.s.ready.On() }
func (r readyRequests) Outcome(outcome string, waitedS float64) { r.s.ready.Outcome(outcome, waitedS) }

func (r readyRequests) Begin(k invoke.ReadyKey) invoke.Ticket {
	key := pool.ReadyKeyOf(k.Snapshot, k.Kind, k.Auto)
	return readyRequest{s: r.s, key: key, tk: r.s.ready.Begin(key)}
}

// readyRequest is one request's ticket on the ready clones of key.
type readyRequest struct {
	s   *Service
	key poolKey
	tk  *readyTicket
}

func (q readyRequest) Take() (*invoke.Clone, string) {
	rc, dead := q.s.ready.Take(q.key)
	if rc == nil {
		return nil, dead
	}
	return &invoke.Clone{VM: rc.VM, Rec: rc.Rec, Since: rc.Since()}, dead
}

func (q readyRequest) Missed()          { q.tk.Missed() }
func (q readyRequest) Dispatch() func() { return q.s.ready.Dispatch(q.tk) }
func (q readyRequest) End()             { q.tk.End() }

// coldAdaptive is the adaptive restore as a cold start uses it.
type coldAdaptive struct{ s *Service }

func (a coldAdaptive) Settle(ctx context.Context, req ColdRequest, snapID string, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice, invoke.Decide) {
	st, choice, auto := a.s.adaptive.Settle(ctx, adaptive.ColdRequest{Strategy: req.Strategy, Snapshot: req.Snapshot}, snapID, st)
	if auto == nil {
		return st, choice, nil
	}
	return st, choice, func(ctx context.Context, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice) {
		return a.s.adaptive.Decide(ctx, auto, st)
	}
}

func (a coldAdaptive) MeasureSet(sess restore.Session, pid int, vm string, inv *Invocation) {
	a.s.adaptive.MeasureSet(sess, pid, vm, inv)
}

func (a coldAdaptive) Observe(ctx context.Context, inv *Invocation, event json.RawMessage, variant bool) {
	a.s.adaptive.Observe(ctx, adaptive.Observation{Inv: inv, Event: event, Variant: variant, Snapshot: inv.Snapshot, Version: inv.Version})
}
