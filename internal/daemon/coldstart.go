package daemon

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/attribute"
)

// The cold start: a VM restored from a snapshot, from request to a guest
// ready for its first invocation (docs/design.md, "Restore").

// RestoreTiming breaks a restore down, in milliseconds.
type RestoreTiming = wire.RestoreTiming

// RestoreVM starts a VM from a snapshot with a restore strategy and waits
// until its agent answers. The VM keeps running until deleted.
func (s *Service) RestoreVM(ctx context.Context, snapID, strategy string) (*catalog.VM, *RestoreTiming, error) {
	st, err := s.strategy(strategy)
	if err != nil {
		return nil, nil, err
	}
	row, err := s.snapshotRow(ctx, snapID)
	if err != nil {
		return nil, nil, err
	}
	lv, rec, t, err := s.restore(ctx, row, restoreOpts{begin: st.Start, start: time.Now(), pool: st.Kind})
	if err != nil {
		return nil, nil, err
	}
	s.refillLater(poolKey{Snapshot: snapID, Kind: st.Kind}, lv.Fn)
	lv.Mu.Unlock()
	return rec, t, nil
}

// strategy finds an offered restore strategy by name ("": the default).
func (s *Service) strategy(name string) (restore.Strategy, error) {
	kind, err := restore.ParseKind(name)
	if err == nil {
		for _, st := range s.strategies {
			if st.Kind == kind {
				return st, nil
			}
		}
		err = fmt.Errorf("restore strategy %q is not offered by this daemon", kind)
	}
	return restore.Strategy{}, fmt.Errorf("%w: %v", ErrInvalid, err)
}

// restoreOpts says how to restore.
type restoreOpts struct {
	begin restore.BeginFunc // the strategy's session (a Strategy's Start, or a prepare step's)
	start time.Time         // when the request arrived
	// pool, if set, is the strategy begin starts: a standby VM of the
	// VMM pool for the snapshot and it may serve the restore.
	pool restore.Kind
	// noSecrets: the guest gets no secrets (a prepare's record VM, which
	// is snapshotted afterwards).
	noSecrets bool
	// noHook: the renewal skips the function's on_restore hook (a ready
	// clone's fill: its dispatch renews it again and runs the hook then).
	noHook bool
	// strict: the strategy may not fall back to vanilla (strictly).
	strict bool
	// admitted, if set, is room admission granted already (a ready
	// clone's fill): the restore does not wait for room.
	admitted func()
}

// restoreOf restores from a snapshot whose row was read already.
func (s *Service) restoreOf(ctx context.Context, sn *catalog.Snapshot, o restoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	row, err := s.rowOf(ctx, sn)
	if err != nil {
		return nil, nil, nil, err
	}
	return s.restore(ctx, row, o)
}

// restore does RestoreVM's work and returns the VM locked, its strategy
// session attached to it: verify, plan (the strategy's session), start the
// VMM, load the device state, resume, renew the clone.
func (s *Service) restore(ctx context.Context, row snapshotRow, o restoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	defer s.vmmPool.BeginRestore()()
	snapID, fn := row.Sn.ID, row.Fn
	if o.pool != "" && s.vmmPool.Size(fn) > 0 {
		key := poolKey{Snapshot: snapID, Kind: o.pool}
		if sb := s.takeStandbyFor(key, o.strict); sb != nil {
			if o.admitted != nil {
				o.admitted() // the standby VM holds room of its own
			}
			lv, rec, t, err := s.restoreStandby(ctx, sb, row, o)
			s.metrics.VMMPool(string(o.pool), true)
			return lv, rec, t, err
		}
		s.metrics.VMMPool(string(o.pool), false)
	}
	// Room first, so nothing is held while waiting for it; the wait is
	// not set-up (it is reported apart).
	waitStart := time.Now()
	release, err := o.admitted, error(nil)
	if release == nil {
		release, err = s.admit(ctx, fn)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	waited := time.Since(waitStart)
	o.start = o.start.Add(waited)
	c, err := s.planRestore(ctx, row, o)
	if err != nil {
		release()
		return nil, nil, nil, err
	}
	c.noSecrets, c.noHook = o.noSecrets, o.noHook
	c.t.AdmissionWaitMS, c.t.VMM = ms(waited), "started"
	rec := &catalog.VM{ID: c.spec.ID, Function: c.fn.Name, Snapshot: c.sn.ID, Strategy: string(c.sess.Kind()), Version: c.sn.Version}
	t1 := time.Now()
	vctx, vsp := s.span(ctx, SpanVMMStart, AttrVM.String(rec.ID), AttrFunction.String(rec.Function),
		AttrSnapshot.String(rec.Snapshot), AttrStrategy.String(rec.Strategy))
	lv, err := s.startVM(vctx, rec, c.spec, c.fn, release)
	if err != nil {
		endSpan(vsp, err)
		c.sess.Close()
		return nil, nil, nil, err
	}
	lv.Mu.Lock()
	lv.Sess, lv.Untimed = c.sess, c.sess.Untimed()
	err = s.startClone(ctx, lv, c, t1)
	endSpan(vsp, err) // the VMM's start ends once the strategy has attached to it
	if err == nil {
		err = s.resumeClone(ctx, lv, c)
	}
	if err != nil {
		return nil, nil, nil, s.failRestore(ctx, lv, snapID, err)
	}
	return s.running(ctx, lv, rec, c.t)
}

// restoreStandby finishes a restore on a standby VM of the VMM pool: its
// snapshot checked again, then device state, resume and renewal. The VM
// already holds its room, so it does not wait for admission.
func (s *Service) restoreStandby(ctx context.Context, sb *standby, row snapshotRow, o restoreOpts) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	lv, c := sb.VM, sb.Plan
	lv.Mu.Lock()
	c.start, c.noHook = o.start, o.noHook
	_, vsp := s.span(ctx, SpanVMMStart, AttrVM.String(lv.ID), AttrFunction.String(c.fn.Name),
		AttrSnapshot.String(c.sn.ID), AttrStrategy.String(string(c.sess.Kind())), AttrVMM.String("pooled"))
	endSpan(vsp, nil) // started ahead of the request: an instant here
	if _, err := s.verifiedRow(ctx, row, false); err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, "standby: "+err.Error())
		lv.Mu.Unlock()
		return nil, nil, nil, err
	}
	c.t = &RestoreTiming{VerifyMS: ms(time.Since(c.start)), VMM: "pooled", Source: "local"}
	if regsync.LazyOf(c.sess) != nil {
		c.t.Source = "registry"
	}
	if cpu, err := procstat.CPUTime(lv.M.PID()); err == nil {
		c.t.StandbyCPUMS = cpu
	}
	// In memory only: the catalog learns "running" once it is.
	s.vms.Mark(lv, catalog.StateBooting)
	lv.Untimed = 0 // what the strategy did before the restore proper was done ahead of the request
	if err := s.resumeClone(ctx, lv, c); err != nil {
		return nil, nil, nil, s.failRestore(ctx, lv, c.sn.ID, err)
	}
	return s.running(ctx, lv, sb.Rec, c.t)
}

// failRestore stops a locked VM whose restore failed and unlocks it.
func (s *Service) failRestore(ctx context.Context, lv *liveVM, snapID string, err error) error {
	reason := fmt.Sprintf("restore from %s: %v", snapID, err)
	if why := lv.StrategyFailed.Load(); why != nil { // the cause: the step then failed with the VMM gone
		reason = fmt.Sprintf("restore from %s: %s strategy: %s (then: %v)", snapID, lv.Sess.Kind(), *why, err)
	} else if exitsWithin(lv, 200*time.Millisecond) { // the step failed because QEMU went: say why it did
		reason += "; vm process exited: " + lv.M.Exit().Reason
	}
	s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
	lv.Mu.Unlock()
	if err := regsync.LazyOf(lv.Sess).Failure(lv.ID); err != nil { // the registry, not the VM, failed
		return err
	}
	return fmt.Errorf("%w: vm %s: %s", ErrVMFailed, lv.ID, reason)
}

// running records a restored VM as running; it comes back locked.
func (s *Service) running(ctx context.Context, lv *liveVM, rec *catalog.VM, t *RestoreTiming) (*liveVM, *catalog.VM, *RestoreTiming, error) {
	rec.State = catalog.StateRunning
	if err := s.db.PutVM(ctx, rec); err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, "catalog: "+err.Error())
		lv.Mu.Unlock()
		return nil, nil, nil, err
	}
	return lv, rec, t, nil
}

// refillLater refills the VMM pool for key in the background.
func (s *Service) refillLater(key poolKey, fn *catalog.Function) {
	if s.vmmPool.Size(fn) > 0 {
		go s.vmmPool.Refill(key, fn)
	}
}

// coldStart is a restore planned but not started.
type coldStart struct {
	sn    *catalog.Snapshot
	fn    *catalog.Function
	spec  vmm.Spec
	sess  restore.Session
	start time.Time // when set-up began (after a cached fill)
	t     *RestoreTiming
	// daemonTrace: the daemon's tracepoint counters when the restore began.
	daemonTrace faulttrace.Counters
	noSecrets   bool // restoreOpts.noSecrets
	noHook      bool // restoreOpts.noHook
}

// planRestore verifies the snapshot and begins the strategy's session.
func (s *Service) planRestore(ctx context.Context, row snapshotRow, o restoreOpts) (*coldStart, error) {
	c := &coldStart{start: o.start, daemonTrace: s.traceOf(os.Getpid())}
	o.begin = s.pins.begin(o.begin) // its artifacts stay as they are until its VMM has them
	v, err := s.verifiedRow(ctx, row, false)
	if err != nil {
		return nil, err
	}
	c.sn, c.fn = v.Sn, v.Fn
	m := v.M
	c.t = &RestoreTiming{VerifyMS: ms(time.Since(c.start))}
	id := newID("vm-")
	c.spec = s.baseSpec(id, c.fn)
	c.spec.Cmdline, c.spec.Incoming = m.Guest.Cmdline, true
	if err := os.MkdirAll(c.spec.RunDir, 0o700); err != nil {
		return nil, err
	}
	env := restore.Env{RunDir: c.spec.RunDir, Log: s.log, Loaders: s.loaders, Store: s.snaps.Store(), VMID: id,
		HugePages: s.cfg.HugePageHint}
	sctx, sp := s.span(ctx, SpanStrategy, AttrVM.String(id), AttrFunction.String(c.fn.Name), AttrSnapshot.String(c.sn.ID))
	snap := restore.Snapshot{Dir: c.sn.Dir, Manifest: m}
	var pulled time.Duration
	switch {
	case c.sn.RemoteMemory:
		c.t.Source = "registry"
		c.sess, c.sn, pulled, err = s.reg.BeginLazy(sctx, c.sn, o.begin, snap, env)
		c.t.PullMS = ms(pulled)
	default:
		c.t.Source = "local"
		if s.cfg.MemorySource != nil {
			snap.Source, snap.MemFile, err = s.cfg.MemorySource(sctx, c.sn.ID)
		}
		if err == nil {
			c.sess, err = o.begin(sctx, snap, env)
		}
	}
	if err == nil {
		// Time the strategy reports apart (cached's fill) is not set-up.
		c.start = c.start.Add(c.sess.Untimed())
		c.spec.Memory = c.sess.Memory()
		sp.SetAttributes(AttrStrategy.String(string(c.sess.Kind())))
	}
	endSpan(sp, err)
	if err != nil {
		_ = os.RemoveAll(c.spec.RunDir)
		// %w twice: callers can tell a strategy that needs the memory file
		// here (restore.ErrNeedsLocalMemory) from other failures.
		return nil, fmt.Errorf("%w: vm %s: %w", ErrVMFailed, id, err)
	}
	return c, nil
}

// startClone runs the strategy's part once the VMM of a locked VM has
// started (REAP's working set installed, say), up to where the device
// state is due.
func (s *Service) startClone(ctx context.Context, lv *liveVM, c *coldStart, started time.Time) error {
	if err := c.sess.Started(ctx, lv.M.PID()); err != nil {
		return fmt.Errorf("%s strategy: %w", c.sess.Kind(), err)
	}
	if failed := c.sess.Failed(); failed != nil {
		go s.watchStrategy(lv, failed)
	}
	c.t.VMMStartMS = ms(time.Since(started))
	return nil
}

// resumeClone takes a locked VM whose VMM and strategy have started
// through device state and resume to a renewed guest, filling the timing;
// its error says which step failed.
func (s *Service) resumeClone(ctx context.Context, lv *liveVM, c *coldStart) error {
	t := c.t
	attrs := []attribute.KeyValue{AttrVM.String(lv.ID), AttrFunction.String(c.fn.Name), AttrSnapshot.String(c.sn.ID),
		AttrStrategy.String(string(c.sess.Kind()))}
	t2 := time.Now()
	lctx, sp := s.span(ctx, SpanStateLoad, attrs...)
	err := lv.M.LoadState(lctx, filepath.Join(c.sn.Dir, snapshot.StateFile))
	endSpan(sp, err)
	if err != nil {
		return fmt.Errorf("load device state: %w", err)
	}
	t.LoadStateMS = ms(time.Since(t2))
	lv.CountersAtResume, _ = procstat.Read(lv.M.PID())
	lv.TraceAtResume = s.traceOf(lv.M.PID())
	lv.DaemonTraceStart = c.daemonTrace
	rctx, sp := s.span(ctx, SpanResume, attrs...)
	err = s.resumeGuest(rctx, lv, c)
	endSpan(sp, err)
	return err
}

// resumeGuest resumes a clone's vCPUs and renews the guest, filling the
// timing.
func (s *Service) resumeGuest(ctx context.Context, lv *liveVM, c *coldStart) error {
	t := c.t
	cont := time.Now()
	if err := lv.M.Resume(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	resumed := time.Now()
	t.ContMS = ms(resumed.Sub(cont))
	t.SetupMS = ms(resumed.Sub(c.start))
	s.vms.Mark(lv, catalog.StateRunning)
	// The restore request is the first the resumed guest gets: its answer
	// also says the agent is up (no ping round trip before it).
	if err := s.withAgent(ctx, lv, s.cfg.BootTimeout, func(ctx context.Context) error {
		r, err := s.renewClone(ctx, lv, !c.noSecrets, c.noHook)
		if err == nil {
			t.AgentRestoreMS, t.AgentSteps = r.DurationMS, r.Steps
			t.AgentWaitMS = ms(r.Read.Sub(r.Written))
		}
		return err
	}); err != nil {
		return fmt.Errorf("guest agent restore: %w", err)
	}
	t.ResumeMS = ms(time.Since(resumed))
	return nil
}

// renewClone makes a restored guest a clone of its own before anyone uses
// it: the host's time for its clock, fresh entropy for its kernel RNG
// (reseeded at once), Python's and OpenSSL's generators reseeded, the function's
// on_restore hook run. Every clone of a snapshot starts with the same
// memory, so without this they would share random numbers and a stale
// clock.
// withSecrets: the guest also gets its function's secrets (functions.Manager.SecretEnv).
// noHook: the hook does not run (an agent before protocol 6 runs it).
// It returns the agent's answer (its DurationMS is the guest's own time).
func (s *Service) renewClone(ctx context.Context, lv *liveVM, withSecrets, noHook bool) (*agent.Reply, error) {
	rn, err := s.renewal(lv, withSecrets)
	if err != nil {
		return nil, err
	}
	rn.NoHook = noHook
	r, err := lv.Agent.Renew(ctx, rn)
	if err != nil {
		return nil, err
	}
	s.renewed(lv, r)
	return r, nil
}

// renewal is what renewClone sends the guest: fresh entropy, and the
// function's secrets if withSecrets.
func (s *Service) renewal(lv *liveVM, withSecrets bool) (agent.Renewal, error) {
	rn := agent.Renewal{Entropy: make([]byte, 64)}
	if _, err := rand.Read(rn.Entropy); err != nil {
		return rn, err
	}
	if withSecrets {
		var err error
		if rn.Secrets, lv.SecretDigests, err = s.functions.SecretEnv(lv.Fn); err != nil {
			return rn, err
		}
	}
	return rn, nil
}

// renewed logs a renewal's answer r.
func (s *Service) renewed(lv *liveVM, r *agent.Reply) {
	s.log.Debug("clone renewed", "vm", lv.ID, "guest_ms", r.DurationMS, "clock_step_ms", r.ClockStepMS)
	if r.Hook != nil && r.Hook.Error != nil {
		s.log.Warn("on_restore failed; invocations of this vm report it", "vm", lv.ID, "function", lv.Fn.Name, "err", r.Hook.Error)
	}
}

// watchStrategy kills a VM whose strategy can no longer serve its memory
// (the kernel would otherwise hand the guest zero pages).
func (s *Service) watchStrategy(lv *liveVM, failed <-chan error) {
	select {
	case err := <-failed:
		why := err.Error()
		lv.StrategyFailed.Store(&why)
		s.log.Error("restore strategy failed; killing vm", "vm", lv.ID, "err", err)
		s.stopVM(context.Background(), lv, catalog.StateFailed, err.Error())
	case <-lv.M.Done():
	}
}
