package daemon

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmend"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// liveVM is a VM with a VMM process. mu serializes what is done to it
// (invocations, snapshots, pause, deletion).
type liveVM struct {
	mu      sync.Mutex
	id      string
	fn      *catalog.Function
	version int // the function version it runs (0: unversioned, -1: a deploy's, unpublished)
	m       vmm.Machine
	agent   *agent.Conn
	runDir  string
	memPath string // guest RAM file for booted VMs (shared); "" for restored ones
	shared  bool   // guest RAM is in memPath, so the VM can be snapshotted
	state   string // guarded by Service.mu

	sess             restore.Session        // restored VMs: the strategy serving their memory
	untimed          time.Duration          // the strategy's time before the restore proper, reported apart (cached's fill)
	countersAtResume procstat.Counters      // VMM counters just before the vCPUs resumed
	traceAtResume    faulttrace.Counters    // the VMM's tracepoint counters then (Config.FaultTraceObject)
	daemonTraceStart faulttrace.Counters    // the daemon's when the restore or warm request began
	spec             vmm.Spec               // what the VMM was started with
	unconfine        func()                 // frees the VM's user id and cgroup once the VMM is gone
	net              *vmnet.Net             // the VM's network namespace and service proxies
	release          func()                 // gives the VM's admitted room back once the VMM is gone
	strategyFailed   atomic.Pointer[string] // why the strategy could no longer serve the VM's memory
	secretDigests    map[string]string      // the secrets its restore delivered: name -> digest (functions.Manager.SecretEnv)

	deleting atomic.Bool                       // a delete waits for the VM: nothing new starts on it (delete_vm.go)
	killedBy atomic.Pointer[string]            // why a delete killed the VMM while the VM was in use
	running  atomic.Pointer[runningInvocation] // the invocation under way, if any
}

func (s *Service) live(id string) (*liveVM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lv, ok := s.vms[id]
	return lv, ok
}

func (s *Service) setState(ctx context.Context, lv *liveVM, state, reason string) {
	s.mu.Lock()
	lv.state = state
	s.mu.Unlock()
	v, err := s.db.GetVM(ctx, lv.id)
	if err != nil {
		return
	}
	v.State, v.Reason = state, reason
	if state == catalog.StateFailed || state == catalog.StateStopped {
		v.PID = 0
	}
	if err := s.db.PutVM(ctx, v); err != nil {
		s.log.Error("record vm state", "vm", lv.id, "state", state, "err", err)
	}
}

func (s *Service) baseSpec(id string, fn *catalog.Function) vmm.Spec {
	cmdline := s.image.Cmdline + " thaw.page_reporting_order=0 thaw.function=" + fn.Name
	if s.tscKHz > 0 {
		// The host's TSC frequency: the guest takes it instead of
		// calibrating, which a busy host can get wrong (internal/tsc).
		cmdline += " tsc_early_khz=" + strconv.Itoa(s.tscKHz)
	}
	spec := vmm.Spec{
		ID: id, RunDir: filepath.Join(s.runDir(), id), GenID: vmm.NewGenID(),
		MemoryMiB: fn.MemoryMiB, VCPUs: fn.VCPUs, Accel: vmm.Accel(s.accel.Accel),
		Kernel: s.image.Path(s.image.KernelFile()),
		Initrd: s.image.Path(guestimage.Initrd),
		// thaw.page_reporting_order=0: the agent makes free page reporting
		// report freed pages of every order, not only 2 MiB blocks.
		Cmdline: cmdline,
		Disks: []vmm.Disk{
			{Path: s.image.Path(guestimage.Rootfs), ReadOnly: true},
			{Path: fn.Disk, ReadOnly: true},
		},
	}
	s.functions.AttachDeps(&spec, fn)
	return spec
}

// startVM launches the VMM for spec, records the VM and starts supervising
// it. The caller owns the returned VM's lifecycle from then on.
// release gives back the room admission granted it (admit), once the
// VM is gone; startVM calls it itself when it fails.
func (s *Service) startVM(ctx context.Context, rec *catalog.VM, spec vmm.Spec, fn *catalog.Function, release func()) (*liveVM, error) {
	s.mu.Lock()
	closed, deleting := s.closed, s.lifecycle.Deleting(fn.Name)
	s.mu.Unlock()
	if closed {
		release()
		return nil, fmt.Errorf("%w: daemon is shutting down", ErrConflict)
	}
	if deleting {
		release()
		return nil, fmt.Errorf("%w: function %q is being deleted", ErrConflict, fn.Name)
	}
	rec.RunDir, rec.Accel, rec.MemoryMiB = spec.RunDir, string(spec.Accel), spec.MemoryMiB
	if rec.State == "" {
		rec.State = catalog.StateBooting
	}
	rec.CreatedAt = time.Now()
	if err := s.db.PutVM(ctx, rec); err != nil {
		release()
		return nil, err
	}
	err := os.MkdirAll(spec.RunDir, 0o700)
	var unconfine func() = func() {}
	if err == nil {
		unconfine, err = s.confineSpec(&spec)
	}
	var vnet *vmnet.Net
	if err == nil {
		vnet, err = s.attachNet(spec.ID, fn)
	}
	var m vmm.Machine
	if err == nil {
		spec.Tap = vnet.Tap()
		m, err = s.cfg.VMM.Start(ctx, spec)
	}
	if err != nil {
		if vnet != nil {
			vnet.Close()
		}
		unconfine()
		_ = os.RemoveAll(spec.RunDir)
		rec.State, rec.Reason = catalog.StateFailed, err.Error()
		_ = s.db.PutVM(context.WithoutCancel(ctx), rec)
		release()
		return nil, fmt.Errorf("%w: %v", ErrVMFailed, err)
	}
	rec.PID = m.PID()
	lv := &liveVM{id: rec.ID, fn: fn, version: rec.Version, m: m, runDir: spec.RunDir, state: catalog.StateBooting,
		spec: spec, unconfine: unconfine, net: vnet, release: release}
	if spec.Memory.Shared {
		lv.memPath, lv.shared = spec.Memory.Path, true
	}
	// Recorded before it is live: a delete that finds it live writes last.
	// The process runs: its record must say so even if the request is
	// canceled now (an operation's cancel), and its stop must be recorded.
	err = s.db.PutVM(context.WithoutCancel(ctx), rec)
	s.mu.Lock()
	s.vms[rec.ID] = lv
	s.mu.Unlock()
	if err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, "catalog: "+err.Error())
		return nil, err
	}
	s.wg.Add(1)
	go s.supervise(lv)
	return lv, nil
}

// attachNet builds the VM's network under its function's egress policy.
func (s *Service) attachNet(vm string, fn *catalog.Function) (*vmnet.Net, error) {
	p, err := vmnet.Policy{Egress: vmnet.Egress(fn.Network.Egress), Services: fn.Network.Services}.Normalize()
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	n, err := s.net.Attach(vm, p)
	if err != nil {
		return nil, err
	}
	s.log.Debug("vm network", "vm", vm, "egress", p.Egress, "services", len(p.Services), "setup_ms", ms(n.SetupTime))
	return n, nil
}

// supervise marks a VM failed when its process exits without thaw asking.
func (s *Service) supervise(lv *liveVM) {
	defer s.wg.Done()
	<-lv.m.Done()
	ex := lv.m.Exit()
	if ex.Requested {
		return
	}
	reason := lv.m.Exit().Reason
	s.log.Warn("vm process exited", "vm", lv.id, "reason", reason)
	s.stopVM(context.Background(), lv, catalog.StateFailed, reason)
}

// stopReason stops lv's VMM because of why (a timeout) and says why the
// VM ended: why, and what the guest's console showed before. A VMM that
// ended on its own first has its own reason.
func (s *Service) stopReason(lv *liveVM, why string) string {
	if err := lv.m.Kill(); err != nil {
		return why + "; " + err.Error()
	}
	ex := lv.m.Exit()
	if !ex.Requested {
		return ex.Reason
	}
	f := ex.Facts
	f.Requested, f.Stop = true, why
	return vmend.Classify(f).String()
}

// stopVM kills the process, frees the run directory and records the final
// state. Safe to call more than once.
func (s *Service) stopVM(ctx context.Context, lv *liveVM, state, reason string) {
	s.mu.Lock()
	_, ok := s.vms[lv.id]
	delete(s.vms, lv.id)
	s.mu.Unlock()
	if !ok {
		return
	}
	_, sp := s.span(ctx, SpanTeardown, AttrVM.String(lv.id), AttrFunction.String(lv.fn.Name),
		AttrVMState.String(state), AttrReason.String(reason))
	defer sp.End()
	if err := lv.m.Kill(); err != nil {
		s.log.Error("kill vm", "vm", lv.id, "err", err)
	}
	if lv.agent != nil {
		lv.agent.Close()
	}
	if lv.sess != nil {
		if err := lv.sess.Close(); err != nil {
			s.log.Warn("close restore session", "vm", lv.id, "err", err)
		}
	}
	if lv.net != nil {
		lv.net.Close()
	}
	if lv.unconfine != nil {
		lv.unconfine()
	}
	if err := os.RemoveAll(lv.runDir); err != nil {
		s.log.Error("remove run dir", "vm", lv.id, "err", err)
	}
	if lv.release != nil {
		lv.release() // the process is gone: its room goes to the next start
	}
	s.setState(ctx, lv, state, reason)
}

// connectAgent dials the agent socket and waits for the guest to answer,
// giving up early if the VMM process dies; it returns the agent's answer.
func (s *Service) connectAgent(ctx context.Context, lv *liveVM, timeout time.Duration) (*agent.Reply, error) {
	var r *agent.Reply
	err := s.withAgent(ctx, lv, timeout, func(ctx context.Context) error {
		var err error
		r, err = lv.agent.WaitReady(ctx, 250*time.Millisecond)
		return err
	})
	return r, err
}

// withAgent runs fn with lv's agent connection, within timeout, giving up
// early if the VMM process dies.
func (s *Service) withAgent(ctx context.Context, lv *liveVM, timeout time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-lv.m.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if lv.agent == nil {
		lv.agent = agent.NewConn(lv.m.Agent())
		lv.agent.SpillTo(s.resultsDir())
		lv.agent.SetMaxLogs(s.cfg.MaxLogBytes)
	}
	err := fn(ctx)
	select {
	case <-lv.m.Done():
		return fmt.Errorf("vm process exited: %s", lv.m.Exit().Reason)
	default:
	}
	return err
}

// BootVM boots a function's VM from the guest image and waits until its
// agent answers (or fails). Guest RAM lives in a shared memory file in the
// VM's run directory, so the VM can be snapshotted. function is NAME (the
// function's own configuration: an unversioned VM), NAME:VERSION or
// NAME:ALIAS (that version's, or the alias's main version's: its
// snapshots belong to the version).
func (s *Service) BootVM(ctx context.Context, function string) (vm *catalog.VM, err error) {
	ref, err := ParseRef(function)
	if err != nil {
		return nil, err
	}
	fn, version, err := s.versions.ConfigOf(ctx, ref, false)
	if err != nil {
		return nil, err
	}
	return s.bootFunction(ctx, fn, version)
}

// bootFunction boots a VM of configuration fn for version (BootVM).
func (s *Service) bootFunction(ctx context.Context, fn *catalog.Function, version int) (vm *catalog.VM, err error) {
	ctx, sp := s.span(ctx, SpanBoot, AttrFunction.String(fn.Name))
	defer func() {
		if vm != nil {
			sp.SetAttributes(AttrVM.String(vm.ID))
		}
		endSpan(sp, err)
	}()
	if _, err := s.functions.LayerOf(fn); err != nil {
		return nil, fmt.Errorf("%w: %v; create the function again", ErrConflict, err)
	}
	phase(ctx, "admission")
	release, err := s.admit(ctx, fn)
	if err != nil {
		return nil, err
	}
	id := newID("vm-")
	spec := s.baseSpec(id, fn)
	spec.Memory = vmm.Memory{Path: filepath.Join(spec.RunDir, "memory"), Shared: true}
	rec := &catalog.VM{ID: id, Function: fn.Name, Version: version}
	start := time.Now()
	phase(ctx, "starting vmm")
	vctx, vsp := s.span(ctx, SpanVMMStart, AttrVM.String(id), AttrFunction.String(fn.Name))
	lv, err := s.startVM(vctx, rec, spec, fn, release)
	endSpan(vsp, err)
	if err != nil {
		return nil, err
	}
	lv.mu.Lock()
	defer lv.mu.Unlock()
	phase(ctx, "booting")
	ready, err := s.connectAgent(ctx, lv, s.cfg.BootTimeout)
	if err != nil {
		reason := fmt.Sprintf("boot: guest agent not ready after %s: %v", time.Since(start).Round(time.Millisecond), err)
		if !isDone(lv) { // else err says why the VMM ended
			reason = s.stopReason(lv, reason)
		}
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
		return nil, fmt.Errorf("%w: vm %s: %s", ErrVMFailed, id, reason)
	}
	if fe := ready.FunctionError; fe != nil {
		// A function that cannot be invoked is never left running (nor
		// snapshotted): the boot fails with the guest's traceback.
		reason := fmt.Sprintf("function %s cannot be imported: %s: %s", fn.Name, fe.Type, fe.Message)
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
		return nil, importFailure{fmt.Errorf("%w: vm %s: %s\n%s", ErrVMFailed, id, reason, strings.TrimRight(fe.Traceback, "\n"))}
	}
	if err := s.functions.CheckBootEnv(ctx, lv.fn, lv.agent); err != nil {
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, "boot: "+err.Error())
		return nil, fmt.Errorf("%w: vm %s: %v", ErrVMFailed, id, err)
	}
	rec.BootMS = ms(time.Since(start))
	rec.State = catalog.StateRunning
	s.mu.Lock()
	lv.state = catalog.StateRunning
	s.mu.Unlock()
	if err := s.db.PutVM(ctx, rec); err != nil {
		return nil, err
	}
	phase(ctx, "agent ready")
	s.log.Info("vm booted", "vm", id, "function", fn.Name, "boot_ms", rec.BootMS)
	return rec, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// GetVM returns a VM.
func (s *Service) GetVM(ctx context.Context, id string) (*catalog.VM, error) {
	if err := validID("vm", id); err != nil {
		return nil, err
	}
	v, err := s.db.GetVM(ctx, id)
	if err == nil {
		s.pool.MarkIdle(v)
	}
	return v, err
}

// ListVMs returns every VM.
func (s *Service) ListVMs(ctx context.Context) ([]*catalog.VM, error) {
	vms, err := s.db.ListVMs(ctx)
	s.pool.MarkIdle(vms...)
	return vms, err
}

// PauseVM stops a running VM's vCPUs.
func (s *Service) PauseVM(ctx context.Context, id string) (*catalog.VM, error) {
	return s.transition(ctx, id, catalog.StateRunning, catalog.StatePaused, vmm.Machine.Pause)
}

// ResumeVM restarts a paused VM's vCPUs and sets its clock, which stood
// still while it was paused.
func (s *Service) ResumeVM(ctx context.Context, id string) (*catalog.VM, error) {
	return s.transition(ctx, id, catalog.StatePaused, catalog.StateRunning, func(m vmm.Machine, ctx context.Context) error {
		if err := m.Resume(ctx); err != nil {
			return err
		}
		lv, ok := s.live(id)
		if !ok || lv.agent == nil {
			return nil
		}
		_, err := lv.agent.Clock(ctx)
		return err
	})
}

func (s *Service) transition(ctx context.Context, id, from, to string, op func(vmm.Machine, context.Context) error) (*catalog.VM, error) {
	lv, err := s.lockLive(ctx, id, from)
	if err != nil {
		return nil, err
	}
	defer lv.mu.Unlock()
	if err := op(lv.m, ctx); err != nil {
		return nil, fmt.Errorf("%w: vm %s: %v", ErrVMFailed, id, err)
	}
	s.setState(ctx, lv, to, "")
	return s.db.GetVM(ctx, id)
}

// lockLive returns the live VM id locked, if it is in one of states.
func (s *Service) lockLive(ctx context.Context, id string, states ...string) (*liveVM, error) {
	v, err := s.GetVM(ctx, id)
	if err != nil {
		return nil, err
	}
	lv, ok := s.live(id)
	if !ok {
		return nil, fmt.Errorf("%w: vm %s is %s", ErrConflict, id, v.State)
	}
	if lv.deleting.Load() { // before waiting for what the delete waits for
		return nil, fmt.Errorf("%w: vm %s is being deleted", ErrConflict, id)
	}
	lv.mu.Lock()
	s.mu.Lock()
	state := lv.state
	_, still := s.vms[id]
	s.mu.Unlock()
	if !still {
		lv.mu.Unlock()
		if fresh, err := s.db.GetVM(ctx, id); err == nil {
			v = fresh
		} else {
			return nil, err // deleted meanwhile
		}
		return nil, fmt.Errorf("%w: vm %s is %s", ErrConflict, id, v.State)
	}
	if lv.deleting.Load() {
		lv.mu.Unlock()
		return nil, fmt.Errorf("%w: vm %s is being deleted", ErrConflict, id)
	}
	for _, st := range states {
		if state == st {
			return lv, nil
		}
	}
	lv.mu.Unlock()
	return nil, fmt.Errorf("%w: vm %s is %s, want %s", ErrConflict, id, state, strings.Join(states, " or "))
}

// liveVMWhere is a live VM for which match holds, or nil; standby VMs of
// the VMM pool do not count (they go when their snapshot or function does).
func (s *Service) liveVMWhere(ctx context.Context, match func(*catalog.VM) bool) (*catalog.VM, error) {
	vms, err := s.db.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vms {
		if v.Live() && v.State != catalog.StateStandby && match(v) {
			return v, nil
		}
	}
	return nil, nil
}

// admit waits until a VM of fn may start (the host budget and fn's own
// concurrency limit); release gives the room back.
func (s *Service) admit(ctx context.Context, fn *catalog.Function) (release func(), err error) {
	ctx, sp := s.span(ctx, SpanAdmission, AttrFunction.String(fn.Name))
	release, err = s.adm.Acquire(ctx, fn.Name, fn.MemoryMiB+s.cfg.VMMemoryOverheadMiB, fn.MaxConcurrency)
	endSpan(sp, err)
	return release, err
}
