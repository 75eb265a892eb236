package invoke

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// ColdRequest asks for the cold-start path: restore a VM from a snapshot,
// invoke, tear the VM down.
type ColdRequest struct {
	InvokeRequest
	Snapshot string // snapshot id; if empty, the newest snapshot of the version Function resolves to
	// Function is NAME (its live alias's version if it has one, else its
	// unversioned snapshots), NAME:VERSION or NAME:ALIAS.
	Function string
	Strategy string
	// Variant is a variant of the strategy (faasnap with techniques off).
	Variant string
	// Strict refuses a strategy's fallback to vanilla.
	Strict bool
}

// Restorer restores clones: the daemon's strategies, its restore (and
// VMM pool) and a clone's renewal.
type Restorer struct {
	// Strategy finds an offered strategy by name ("": the default).
	Strategy func(name string) (restore.Strategy, error)
	// Restore restores a VM from sn as o says and returns it locked.
	Restore func(ctx context.Context, sn *catalog.Snapshot, o RestoreOpts) (*vms.Live, *catalog.VM, *wire.RestoreTiming, error)
	// RefusedFallback turns a strict restore's refusal into the error the
	// request answers; other errors pass unchanged.
	RefusedFallback func(err error) error
	// RefillLater refills the VMM pool of snapshot and kind in the
	// background.
	RefillLater func(snapshot string, kind restore.Kind, fn *catalog.Function)
	// Renewal is a clone's renewal (with its function's secrets);
	// Renewed takes note of the agent's answer to it.
	Renewal func(lv *vms.Live, withSecrets bool) (agent.Renewal, error)
	Renewed func(lv *vms.Live, r *agent.Reply)
}

// RestoreOpts says how a cold start restores.
type RestoreOpts struct {
	Begin restore.BeginFunc // the strategy's session
	Start time.Time         // when the request arrived (its import excluded)
	// Pool, if set, is the strategy Begin starts: a standby VM of the VMM
	// pool for the snapshot and it may serve the restore.
	Pool   restore.Kind
	Strict bool // the strategy may not fall back to vanilla
}

// InvokeCold restores a fresh VM from a snapshot, invokes it once and tears
// it down, returning the restore and invocation breakdown.
func (v *Invoker) InvokeCold(ctx context.Context, req ColdRequest) (*wire.Invocation, error) {
	start := time.Now()
	ref, timeout, err := v.checkCold(&req)
	if err != nil {
		return nil, err
	}
	if req.Snapshot == "" { // the function's snapshot stays while this runs
		g := v.d.Cold.Gate(req.Function)
		g.RLock()
		defer g.RUnlock()
	}
	sn, strategy, imported, target, err := v.coldTarget(ctx, req, ref)
	if err != nil {
		return nil, err
	}
	snapID := sn.ID // the row is read once here and passed down
	strategy, choice, decide := v.d.Cold.Adaptive.Settle(ctx, req, snapID, strategy)
	v.d.Tracing.AnnotateCold(ctx, snapID, req.Function)
	if err := strategy.CheckVariant(req.Variant); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	// The function's next invocation, naming no snapshot or strategy: a
	// ready clone or a VM kept idle from an earlier one serves it.
	pooled := req.Snapshot == "" && req.Strategy == "" && !req.EvictCache
	if pooled {
		tk, inv, pctx, err := v.invokePooled(ctx, req, ReadyKey{Snapshot: snapID, Kind: strategy.Kind, Auto: decide != nil}, timeout, start, target)
		defer tk.End()
		if inv != nil || err != nil {
			return inv, err
		}
		ctx = pctx
	}
	if decide != nil { // nothing served it: a cold start, the policy's to choose
		strategy, choice = decide(ctx, strategy)
		if err := strategy.CheckVariant(req.Variant); err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
		}
	}
	if req.EvictCache {
		t := time.Now()
		if err := v.d.Cold.Evict(ctx, sn); err != nil {
			return nil, err
		}
		start = start.Add(time.Since(t)) // eviction is preparation, not part of the cold start
	}
	// The import is part of the total but reported apart, not as set-up.
	o := coldOptions(req, strategy, start.Add(imported))
	if choice.How == "explore" {
		o.Pool = "" // an exploration neither uses nor refills a standby VM of the strategy it tries
	}
	return v.restoreAndInvoke(ctx, req, sn, o, coldStart{start: start, imported: imported, target: target, timeout: timeout,
		choice: choice, pooled: pooled})
}

// coldStart is what a cold start settled before its restore.
type coldStart struct {
	start    time.Time
	imported time.Duration // the registry import's share of the total
	target   Target
	timeout  time.Duration
	choice   *wire.StrategyChoice
	pooled   bool // the VM may be kept for the function's next invocation
}

// restoreAndInvoke restores a VM from sn for a cold request, invokes it
// and finishes (a stale version whose snapshot no longer restores boots
// instead).
func (v *Invoker) restoreAndInvoke(ctx context.Context, req ColdRequest, sn *catalog.Snapshot, o RestoreOpts, c coldStart) (*wire.Invocation, error) {
	stale := v.d.Cold.StaleNote(req.Function, c.target.Version)
	lv, rec, rt, err := v.d.Restore.Restore(ctx, sn, o)
	if err != nil && stale != "" && errors.Is(err, errdefs.ErrSnapshotUnusable) {
		return v.d.Cold.InvokeBooted(ctx, req.Function, c.target, req.Event, c.timeout, c.start, stale)
	}
	if err != nil {
		return nil, v.d.Restore.RefusedFallback(err)
	}
	defer lv.Mu.Unlock()
	inv := &wire.Invocation{ID: NewID(), Function: rec.Function, VM: rec.ID, Mode: "cold",
		Snapshot: sn.ID, Strategy: rec.Strategy, EvictedCache: req.EvictCache, Version: rec.Version, Alias: c.target.Alias,
		StrategyChoice: c.choice}
	inv.Timing.Restore, inv.Timing.ImportMS = rt, ms(c.imported)
	if stale != "" {
		inv.Timing.Build = &wire.BuildNote{Stale: stale, Served: "snapshot"}
	}
	v.d.Tracing.Annotate(ctx, inv)
	if err := v.Locked(ctx, lv, inv, req.Event, c.timeout); err != nil {
		return nil, v.d.RecordFailure(ctx, inv, c.start, err)
	}
	v.finishCold(ctx, lv, rec, inv, coldEnd{start: c.start, pool: o.Pool, pooled: c.pooled, event: req.Event, variant: req.Variant != ""})
	return inv, nil
}

// invokePooled serves a pooled invocation on a ready clone of key, else
// on a VM kept from an earlier invocation; inv and err nil if neither
// served it (the context returned says why for the record). The ticket's
// end is the caller's, once the request is served.
func (v *Invoker) invokePooled(ctx context.Context, req ColdRequest, key ReadyKey, timeout time.Duration, start time.Time, target Target) (Ticket, *wire.Invocation, context.Context, error) {
	tk := v.d.Ready.Begin(key)
	inv, ctx, err := v.invokeReady(ctx, key, tk, req.Event, timeout, start, target)
	if inv != nil || err != nil {
		return tk, inv, ctx, err
	}
	if k := v.d.TakeKept(req.Function, key.Snapshot); k != nil {
		inv, err := v.invokeKept(ctx, k, req.Event, timeout, start, target)
		return tk, inv, ctx, err
	}
	return tk, nil, ctx, nil
}

// checkCold checks a cold request's event and timeout, and reads its
// function reference (req.Function becomes the function's name).
func (v *Invoker) checkCold(req *ColdRequest) (versions.Ref, time.Duration, error) {
	var ref versions.Ref
	if err := CheckEvent(req.Event); err != nil {
		return ref, 0, err
	}
	timeout, err := v.Timeout(req.Timeout)
	if err != nil {
		return ref, 0, err
	}
	if req.Function != "" {
		if ref, err = v.d.Cold.ParseRef(req.Function); err != nil {
			return ref, 0, err
		}
		req.Function = ref.Function
	}
	return ref, timeout, nil
}

// coldEnd is what finishing a cold invocation needs besides its VM.
type coldEnd struct {
	start   time.Time
	pool    restore.Kind // the strategy whose VMM pool the restore took from, if any
	pooled  bool         // the VM may be kept for the function's next invocation
	event   json.RawMessage
	variant bool
}

// finishCold completes a cold invocation that ran: its strategy's stats
// and set use, its total, the VMM pool's refill, keeping or tearing down
// the VM, the record and the adaptive policy's observation.
func (v *Invoker) finishCold(ctx context.Context, lv *vms.Live, rec *catalog.VM, inv *wire.Invocation, e coldEnd) {
	st := lv.Sess.Stats()
	st.Kind = string(lv.Sess.Kind())
	inv.StrategyStats = &st
	v.d.Cold.Adaptive.MeasureSet(lv.Sess, lv.M.PID(), lv.ID, inv)
	// Time the strategy reports apart (cached's fill) is not part of the
	// cold start.
	inv.Timing.TotalMS = ms(time.Since(e.start)) - ms(lv.Untimed)
	if e.pool != "" {
		v.d.Restore.RefillLater(inv.Snapshot, e.pool, lv.Fn)
	}
	if !e.pooled || !v.d.Park(lv, rec, inv.Snapshot) {
		inv.Timing.TeardownMS = v.TearDown(ctx, lv, rec)
	}
	v.d.Record(ctx, inv)
	v.d.Cold.Adaptive.Observe(ctx, inv, e.event, e.variant)
	rt := inv.Timing.Restore
	v.log.Info("cold invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "snapshot", inv.Snapshot, "strategy", inv.Strategy,
		"ok", inv.OK, "setup_ms", rt.SetupMS, "resume_ms", rt.ResumeMS, "invoke_ms", inv.Timing.InvokeMS,
		"total_ms", inv.Timing.TotalMS)
}

// coldOptions says how a cold start restores: with strategy (and the
// request's variant), from a standby VM of the VMM pool unless the cache is
// evicted first or a variant is asked for, strictly if asked to.
func coldOptions(req ColdRequest, strategy restore.Strategy, start time.Time) RestoreOpts {
	o := RestoreOpts{Begin: strategy.Start, Start: start, Strict: req.Strict}
	if req.Variant != "" {
		o.Begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
			env.Variant = req.Variant
			return strategy.Start(ctx, snap, env)
		}
	}
	if !req.EvictCache && req.Variant == "" {
		o.Pool = strategy.Kind // an evicted cold start is measured from storage, so never from a standby VM
	}
	return o
}

// TearDown stops a cold invocation's VM (the pool did not keep it) and
// forgets it; it returns how long that took, in ms.
func (v *Invoker) TearDown(ctx context.Context, lv *vms.Live, rec *catalog.VM) float64 {
	t := time.Now()
	v.d.VMs.Stop(ctx, lv, catalog.StateStopped, "cold invocation finished")
	if err := v.d.Catalog.DeleteVM(ctx, rec.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) { // a delete forgot it first
		v.log.Error("forget cold vm", "vm", rec.ID, "err", err)
	}
	return ms(time.Since(t))
}
