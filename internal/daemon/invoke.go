package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/daemon/pool"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/attribute"
)

// MaxEventBytes bounds an invocation's event (Lambda's synchronous limit).
const MaxEventBytes = 6 << 20

// Invocation is the outcome of one invocation, as the API returns it.
type Invocation = wire.Invocation

// Timing breaks an invocation down, in milliseconds.
type Timing = wire.Timing

// InvokeRequest asks for one invocation.
type InvokeRequest struct {
	Event   json.RawMessage
	Timeout time.Duration // 0: the daemon's default
	// EvictCache evicts the snapshot's files (memory, device state and the
	// strategies' artifacts) from the page cache first: cold invocations only.
	EvictCache bool
	// Logs: the caller wants the invocation's logs in its answer (the API
	// leaves them out otherwise; the history keeps them either way).
	Logs bool
}

func (s *Service) timeout(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return s.cfg.InvokeTimeout, nil
	}
	if d < 0 || d > MaxInvokeTimeout {
		return 0, fmt.Errorf("%w: timeout must be between 1 ms and 1 h", ErrInvalid)
	}
	return d, nil
}

func checkEvent(ev json.RawMessage) error {
	if len(ev) > MaxEventBytes {
		return fmt.Errorf("%w: event is %d bytes, the limit is %d", ErrInvalid, len(ev), MaxEventBytes)
	}
	if len(ev) > 0 && !json.Valid(ev) {
		return fmt.Errorf("%w: event is not valid JSON", ErrInvalid)
	}
	return nil
}

// InvokeVM invokes the function on a running VM (a warm invocation).
func (s *Service) InvokeVM(ctx context.Context, vmID string, req InvokeRequest) (*Invocation, error) {
	if err := checkEvent(req.Event); err != nil {
		return nil, err
	}
	timeout, err := s.timeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lv, err := s.lockLive(ctx, vmID, catalog.StateRunning)
	if err != nil {
		return nil, err
	}
	defer lv.Mu.Unlock()
	if req.EvictCache {
		return nil, fmt.Errorf("%w: evict_cache applies to cold invocations only", ErrInvalid)
	}
	inv := &Invocation{ID: newID("inv-"), Function: lv.Fn.Name, VM: vmID, Mode: "warm", Version: max(lv.Version, 0)}
	annotate(ctx, invocationAttrs(inv)...)
	lv.CountersAtResume, _ = procstat.Read(lv.M.PID())
	lv.TraceAtResume, lv.DaemonTraceStart = s.traceOf(lv.M.PID()), s.traceOf(os.Getpid())
	if err := s.invokeLocked(ctx, lv, inv, req.Event, timeout); err != nil {
		return nil, s.invokeFailed(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	s.record(ctx, inv)
	return inv, nil
}

// invokeLocked sends the event to the agent of a locked VM. A guest that
// does not answer in time, or whose VMM dies, is killed and marked failed.
func (s *Service) invokeLocked(ctx context.Context, lv *liveVM, inv *Invocation, event json.RawMessage, timeout time.Duration) error {
	return s.invokeWith(ctx, lv, inv, timeout, func(ctx context.Context) (*agent.Reply, error) {
		return lv.Agent.Invoke(ctx, lv.Fn.Name, event)
	})
}

// invokeWith is invokeLocked with the agent's part given: call returns
// the invocation's answer (a ready clone's, whose event went with its
// renewal).
func (s *Service) invokeWith(ctx context.Context, lv *liveVM, inv *Invocation, timeout time.Duration,
	call func(context.Context) (*agent.Reply, error)) (err error) {
	sctx, sp := s.span(ctx, SpanInvoke, invocationAttrs(inv)...)
	defer func() {
		if err == nil {
			sp.SetAttributes(AttrInvocationOK.Bool(inv.OK))
		}
		endSpan(sp, err)
	}()
	ictx, cancel := context.WithTimeout(sctx, timeout)
	defer cancel()
	t0 := time.Now()
	lv.Running.Store(&runningInvocation{ID: inv.ID, Started: t0, Timeout: timeout})
	reply, err := call(ictx)
	lv.Running.Store(nil)
	inv.Timing.InvokeMS = ms(time.Since(t0))
	if err != nil {
		if err := s.killedDuring(ctx, lv, inv); err != nil { // a delete killed the VM
			return err
		}
		var reason string
		var kind error
		switch why := lv.StrategyFailed.Load(); {
		case why != nil: // the strategy stopped serving memory and the VM was killed
			reason = fmt.Sprintf("%s strategy failed during the invocation: %s", lv.Sess.Kind(), *why)
			kind = ErrVMFailed
		case errors.Is(err, agent.ErrTimeout) && ctx.Err() == nil:
			reason = s.stopReason(lv, fmt.Sprintf("invocation timed out after %s; guest killed", timeout))
			kind = ErrTimeout
		case isDone(lv) || errors.Is(err, io.EOF) && exitsWithin(lv, time.Second):
			// An agent channel closing at EOF is QEMU going away: wait for
			// it, so the reason says why (the guest's memory, a crash).
			reason = "vm process exited during the invocation: " + lv.M.Exit().Reason
			kind = ErrVMFailed
		default:
			reason = s.stopReason(lv, fmt.Sprintf("guest agent failed during the invocation: %v; guest killed", err))
			kind = ErrVMFailed
		}
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
		if err := regsync.LazyOf(lv.Sess).Failure(lv.ID); err != nil { // the registry, not the VM, failed
			return err
		}
		if kind == ErrTimeout {
			return s.timedOut(lv.ID, reason)
		}
		return fmt.Errorf("%w: vm %s: %s", kind, lv.ID, reason)
	}
	if after, err := procstat.Read(lv.M.PID()); err == nil {
		d := procstat.Since(after, lv.CountersAtResume)
		inv.Process = &d
	}
	if s.faults != nil {
		inv.Trace = s.faultTrace(lv)
	}
	if lv.Sess != nil {
		lv.Sess.InvocationDone()
	}
	inv.OK = reply.OK
	inv.Result = reply.Result
	inv.Error = reply.Error
	inv.Logs = invocationLogs(sctx, reply)
	inv.Timing.GuestMS = reply.DurationMS
	if !reply.OK && reply.Error == nil {
		inv.Error = &agent.Error{Type: "AgentError", Message: "guest reported failure without details"}
	}
	return nil
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

// exitsWithin waits up to d for the VMM to exit.
func exitsWithin(lv *liveVM, d time.Duration) bool {
	select {
	case <-lv.M.Done():
		return true
	case <-time.After(d):
		return false
	}
}

func isDone(lv *liveVM) bool {
	select {
	case <-lv.M.Done():
		return true
	default:
		return false
	}
}

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
	// Strict refuses a strategy's fallback to vanilla (strict.go).
	Strict bool
}

// InvokeCold restores a fresh VM from a snapshot, invokes it once and tears
// it down, returning the restore and invocation breakdown.
func (s *Service) InvokeCold(ctx context.Context, req ColdRequest) (*Invocation, error) {
	start := time.Now()
	ref, timeout, err := s.checkCold(&req)
	if err != nil {
		return nil, err
	}
	if req.Snapshot == "" { // the function's snapshot stays while this runs
		g := s.fnGate(req.Function)
		g.RLock()
		defer g.RUnlock()
	}
	sn, strategy, imported, target, err := s.coldTarget(ctx, req, ref)
	if err != nil {
		return nil, err
	}
	snapID := sn.ID // the row is read once here and passed down
	strategy, choice, auto := s.adaptive.Settle(ctx, adaptive.ColdRequest{Strategy: req.Strategy, Snapshot: req.Snapshot}, snapID, strategy)
	annotate(ctx, AttrSnapshot.String(snapID))
	if req.Function != "" {
		annotate(ctx, AttrFunction.String(req.Function))
	}
	if err := strategy.CheckVariant(req.Variant); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	// The function's next invocation, naming no snapshot or strategy: a
	// ready clone or a VM kept idle from an earlier one serves it.
	pooled := req.Snapshot == "" && req.Strategy == "" && !req.EvictCache
	if pooled {
		tk, inv, pctx, err := s.invokePooled(ctx, req, pool.ReadyKeyOf(snapID, strategy.Kind, auto != nil), timeout, start, target)
		defer tk.End()
		if inv != nil || err != nil {
			return inv, err
		}
		ctx = pctx
	}
	if auto != nil { // nothing served it: a cold start, the policy's to choose
		strategy, choice = s.adaptive.Decide(ctx, auto, strategy)
		if err := strategy.CheckVariant(req.Variant); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if req.EvictCache {
		t := time.Now()
		if err := s.evictSnapshot(ctx, sn); err != nil {
			return nil, err
		}
		start = start.Add(time.Since(t)) // eviction is preparation, not part of the cold start
	}
	// The import is part of the total but reported apart, not as set-up.
	o := coldOptions(req, strategy, start.Add(imported))
	if choice.How == "explore" {
		o.pool = "" // an exploration neither uses nor refills a standby VM of the strategy it tries
	}
	stale := s.staleNote(req.Function, target.Version)
	lv, rec, rt, err := s.restoreOf(ctx, sn, o)
	if err != nil && stale != "" && errors.Is(err, ErrSnapshotUnusable) {
		return s.invokeBooted(ctx, req.Function, target, req.Event, timeout, start, stale)
	}
	if err != nil {
		return nil, refusedFallback(err)
	}
	defer lv.Mu.Unlock()
	inv := &Invocation{ID: newID("inv-"), Function: rec.Function, VM: rec.ID, Mode: "cold",
		Snapshot: snapID, Strategy: rec.Strategy, EvictedCache: req.EvictCache, Version: rec.Version, Alias: target.Alias,
		StrategyChoice: choice}
	inv.Timing.Restore, inv.Timing.ImportMS = rt, ms(imported)
	if stale != "" {
		inv.Timing.Build = &wire.BuildNote{Stale: stale, Served: "snapshot"}
	}
	annotate(ctx, invocationAttrs(inv)...)
	if err := s.invokeLocked(ctx, lv, inv, req.Event, timeout); err != nil {
		return nil, s.invokeFailed(ctx, inv, start, err)
	}
	s.finishCold(ctx, lv, rec, inv, coldEnd{start: start, pool: o.pool, pooled: pooled, event: req.Event, variant: req.Variant != ""})
	return inv, nil
}

// invokePooled serves a pooled invocation on a ready clone of key, else
// on a VM kept from an earlier invocation; inv and err nil if neither
// served it (the context returned says why for the record). The ticket's
// end is the caller's, once the request is served.
func (s *Service) invokePooled(ctx context.Context, req ColdRequest, key poolKey, timeout time.Duration, start time.Time, target Target) (*readyTicket, *Invocation, context.Context, error) {
	tk := s.ready.Begin(key)
	inv, ctx, err := s.invokeReady(ctx, key, tk, req.Event, timeout, start, target)
	if inv != nil || err != nil {
		return tk, inv, ctx, err
	}
	if k := s.pool.Take(req.Function, key.Snapshot); k != nil {
		s.metrics.KeepAlive(true)
		inv, err := s.invokeKept(ctx, k, req.Event, timeout, start, target)
		return tk, inv, ctx, err
	}
	s.metrics.KeepAlive(false)
	return tk, nil, ctx, nil
}

// checkCold checks a cold request's event and timeout, and reads its
// function reference (req.Function becomes the function's name).
func (s *Service) checkCold(req *ColdRequest) (versions.Ref, time.Duration, error) {
	var ref versions.Ref
	if err := checkEvent(req.Event); err != nil {
		return ref, 0, err
	}
	timeout, err := s.timeout(req.Timeout)
	if err != nil {
		return ref, 0, err
	}
	if req.Function != "" {
		if ref, err = ParseRef(req.Function); err != nil {
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
func (s *Service) finishCold(ctx context.Context, lv *liveVM, rec *catalog.VM, inv *Invocation, e coldEnd) {
	st := lv.Sess.Stats()
	st.Kind = string(lv.Sess.Kind())
	inv.StrategyStats = &st
	s.adaptive.MeasureSet(lv.Sess, lv.M.PID(), lv.ID, inv)
	// Time the strategy reports apart (cached's fill) is not part of the
	// cold start.
	inv.Timing.TotalMS = ms(time.Since(e.start)) - ms(lv.Untimed)
	if e.pool != "" {
		s.refillLater(poolKey{Snapshot: inv.Snapshot, Kind: e.pool}, lv.Fn)
	}
	if !e.pooled || !s.park(lv, rec, inv.Snapshot) {
		inv.Timing.TeardownMS = s.tearDownCold(ctx, lv, rec)
	}
	s.record(ctx, inv)
	s.adaptive.Observe(ctx, adaptive.Observation{Inv: inv, Event: e.event, Variant: e.variant, Snapshot: inv.Snapshot, Version: inv.Version})
	rt := inv.Timing.Restore
	s.log.Info("cold invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "snapshot", inv.Snapshot, "strategy", inv.Strategy,
		"ok", inv.OK, "setup_ms", rt.SetupMS, "resume_ms", rt.ResumeMS, "invoke_ms", inv.Timing.InvokeMS,
		"total_ms", inv.Timing.TotalMS)
}

// coldOptions says how a cold start restores: with strategy (and the
// request's variant), from a standby VM of the VMM pool unless the cache is
// evicted first or a variant is asked for, strictly if asked to.
func coldOptions(req ColdRequest, strategy restore.Strategy, start time.Time) restoreOpts {
	o := restoreOpts{begin: strategy.Start, start: start}
	if req.Variant != "" {
		o.begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
			env.Variant = req.Variant
			return strategy.Start(ctx, snap, env)
		}
	}
	if !req.EvictCache && req.Variant == "" {
		o.pool = strategy.Kind // an evicted cold start is measured from storage, so never from a standby VM
	}
	if req.Strict {
		o = strictly(o)
	}
	return o
}

// tearDownCold stops a cold invocation's VM (the pool did not keep it) and
// forgets it; it returns how long that took, in ms.
func (s *Service) tearDownCold(ctx context.Context, lv *liveVM, rec *catalog.VM) float64 {
	t := time.Now()
	s.stopVM(ctx, lv, catalog.StateStopped, "cold invocation finished")
	if err := s.db.DeleteVM(ctx, rec.ID); err != nil && !errors.Is(err, ErrNotFound) { // a delete forgot it first
		s.log.Error("forget cold vm", "vm", rec.ID, "err", err)
	}
	return ms(time.Since(t))
}

// coldTarget resolves the snapshot and strategy of a cold start: the
// newest snapshot of the version ref resolves to unless the request names
// one (imported from the registry when the node has none; imported is how
// long that took).
func (s *Service) coldTarget(ctx context.Context, req ColdRequest, ref versions.Ref) (sn *catalog.Snapshot, strategy restore.Strategy, imported time.Duration, target Target, err error) {
	fail := func(err error) (*catalog.Snapshot, restore.Strategy, time.Duration, Target, error) {
		return nil, restore.Strategy{}, 0, Target{}, err
	}
	if strategy, err = s.strategy(req.Strategy); err != nil {
		return fail(err)
	}
	if req.Snapshot != "" && ref.Qualified() {
		return fail(fmt.Errorf("%w: name a snapshot or a version or alias, not both", ErrInvalid))
	}
	snapID := req.Snapshot
	// Unless the request names one, a snapshot whose memory is in the
	// registry (imported now, or pulled lazily before) restores with the
	// remote strategy.
	remote, err := s.strategy(s.cfg.RemoteStrategy)
	if err != nil {
		return fail(err)
	}
	if snapID == "" {
		var notHere error
		if target, notHere = s.versions.Resolve(ctx, ref); notHere != nil {
			if ref.Version == 0 || !errors.Is(notHere, ErrNotFound) {
				return fail(notHere)
			}
			target = Target{Version: ref.Version} // a version not here: perhaps in the registry
		} else {
			snapID, notHere = s.versions.NewestSnapshotOf(ctx, req.Function, target.Version)
		}
		if notHere != nil {
			if vs, _ := s.db.ListVersions(ctx, req.Function); target.Version == 0 && len(vs) > 0 {
				return fail(notHere) // no live alias here: which version is meant is this node's call
			}
			t := time.Now()
			if req.Strategy == "" {
				strategy = remote
			}
			if snapID, err = s.reg.ImportOnInvoke(ctx, req.Function, target.Version, strategy.Kind, notHere); err != nil {
				return fail(err)
			}
			imported = time.Since(t)
		}
	}
	if sn, err = s.GetSnapshot(ctx, snapID); err != nil {
		return fail(err)
	}
	if req.Strategy == "" && strategy.Kind != remote.Kind && sn.RemoteMemory {
		strategy = remote
	}
	if req.Snapshot != "" && req.Function != "" && sn.Function != req.Function {
		return fail(fmt.Errorf("%w: snapshot %s belongs to function %q, not %q", ErrInvalid, snapID, sn.Function, req.Function))
	}
	return sn, strategy, imported, target, nil
}

// Info describes the daemon.
func (s *Service) Info() Info {
	strategies := make([]string, len(s.strategies))
	described := make([]wire.StrategyDescription, len(s.strategies))
	for i, st := range s.strategies {
		strategies[i], described[i] = string(st.Kind), st.Describe()
	}
	i := Info{Version: buildinfo.Version, APIVersion: APIVersion, Accel: s.accel, Image: guestImage(s.image),
		VMM:     wire.VMMInfo{Name: s.cfg.VMM.Name(), Version: s.vmmVersion, Machine: s.cfg.VMM.MachineABI()},
		DataDir: s.cfg.DataDir, Strategies: strategies, StrategyDetails: described, HugePageHint: s.cfg.HugePageHint, TSCKHz: s.tscKHz}
	i.Registry = s.reg.RegistryInfo()
	i.RegistryKey = s.reg.KeyInfo()
	i.Limits = s.limits()
	return i
}

// EvictSnapshot drops a snapshot's files and its strategies' artifacts from
// the host page cache, so the next restores read them from disk
// (benchmarks' cold measurements; a burst evicts once for all of its
// restores).
func (s *Service) EvictSnapshot(ctx context.Context, id string) error {
	sn, err := s.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	return s.evictSnapshot(ctx, sn)
}

// evictSnapshot drops a snapshot's files, and its strategies' artifacts,
// from the host page cache (posix_fadvise DONTNEED on each file; never a
// system-wide drop), so the next restore reads them from disk.
func (s *Service) evictSnapshot(ctx context.Context, sn *catalog.Snapshot) error {
	id := sn.ID
	// Standby VMs map the snapshot's memory (and hold what their strategy
	// read ahead): a cold start after an eviction must not find them.
	s.dropSnapshotStandby(id, nil, whyStandbyEvict)
	paths := []string{filepath.Join(sn.Dir, snapshot.MemoryFile), filepath.Join(sn.Dir, snapshot.StateFile)}
	paths = append(paths, snapshots.ArtifactFiles(sn.Dir)...)
	if err := pagecache.EvictAll(paths...); err != nil {
		return fmt.Errorf("evict snapshot %s: %w", id, err)
	}
	return nil
}

// invokeKept runs an invocation on an idle VM of the pool and keeps the VM
// again (or stops it if the pool is full or the function opted out).
func (s *Service) invokeKept(ctx context.Context, k *kept, event json.RawMessage, timeout time.Duration, start time.Time, target Target) (*Invocation, error) {
	k.VM.Mu.Lock()
	inv := &Invocation{ID: newID("inv-"), Function: k.Rec.Function, VM: k.Rec.ID, Mode: "pooled",
		Snapshot: k.Snapshot, Strategy: k.Rec.Strategy, Version: k.Rec.Version, Alias: target.Alias}
	annotate(ctx, invocationAttrs(inv)...)
	err := s.invokeLocked(ctx, k.VM, inv, event, timeout)
	kept := err == nil && s.park(k.VM, k.Rec, k.Snapshot)
	k.VM.Mu.Unlock()
	if !kept {
		s.retire(context.WithoutCancel(ctx), k.VM, k.Rec, "pooled invocation finished")
	}
	if err != nil {
		return nil, s.invokeFailed(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	s.record(ctx, inv)
	s.log.Info("pooled invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "ok", inv.OK,
		"invoke_ms", inv.Timing.InvokeMS, "total_ms", inv.Timing.TotalMS)
	return inv, nil
}

// traceOf is process pid's tracepoint counters (zero when tracing is off).
func (s *Service) traceOf(pid int) faulttrace.Counters {
	if s.faults == nil {
		return faulttrace.Counters{}
	}
	c, _ := s.faults.Read(pid)
	return c
}

// faultTrace is what the tracepoints counted for the VMM from the vCPUs
// resuming (cold) or the request (warm) to the answer, and for the daemon
// from the restore (or request) to the answer.
func (s *Service) faultTrace(lv *liveVM) *wire.FaultTrace {
	vmm := s.traceOf(lv.M.PID()).Sub(lv.TraceAtResume)
	d := s.traceOf(os.Getpid()).Sub(lv.DaemonTraceStart)
	return &wire.FaultTrace{VMMFaults: vmm.Faults, VMMReadRequests: vmm.ReadBios, VMMReadBytes: vmm.ReadBytes,
		VMMBlockedMS: vmm.BlockedMS(), VMMBlockedWaits: vmm.Blocked,
		DaemonReadRequests: d.ReadBios, DaemonReadBytes: d.ReadBytes}
}
