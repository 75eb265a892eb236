package daemon

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/config"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// The VMs with a VMM process are package vms's: starts, stops, boots,
// confinement, deletes and the host's clean-up. The daemon wires it and
// answers for it.

// liveVM is a VM with a VMM process (package vms).
type liveVM = vms.Live

// runningInvocation is the invocation a VM is serving.
type runningInvocation = vms.Running

// Confinement defaults (package daemon/config).
const (
	// DefaultVMUIDBase starts the range of user ids VMMs run as, one per
	// live VM, so that VMs cannot signal, trace or read each other. The
	// range 1879048192-2147483647 is left unused by Linux distributions
	// and systemd (their container ranges lie below it).
	DefaultVMUIDBase  = config.DefaultVMUIDBase
	DefaultVMUIDCount = config.DefaultVMUIDCount
	// DefaultVMMemoryOverheadMiB is what a VM's cgroup may use beyond guest
	// RAM: QEMU itself, TCG's translation cache, page cache it faults in.
	DefaultVMMemoryOverheadMiB = config.DefaultVMMemoryOverheadMiB
)

// whyCascade is why a function's delete killed a VM in use.
const whyCascade = vms.WhyCascade

// VMDeletedError is the error type the invocation history records for an
// invocation whose VM was deleted while it ran.
const VMDeletedError = invoke.VMDeletedError

// newVMs makes the VM component from the configuration.
func (s *Service) newVMs() *vms.Manager {
	c := s.cfg
	return vms.New(vms.Config{DataDir: c.DataDir, RunDir: s.runDir(), ResultsDir: s.resultsDir(),
		BootTimeout: c.BootTimeout, MaxLogBytes: c.MaxLogBytes, ConsoleLogLimit: c.ConsoleLogLimit,
		UIDBase: c.VMUIDBase, UIDCount: c.VMUIDCount, MemoryOverheadMiB: c.VMMemoryOverheadMiB, CPUWeight: c.VMCPUWeight,
		CgroupRoot: c.CgroupRoot, AllowFullEgress: c.AllowFullEgress,
	}, vms.Deps{Catalog: s.db, Log: s.log, VMM: c.VMM, Image: s.image,
		Host:       func() (vmm.Accel, int) { return vmm.Accel(s.accel.Accel), s.tscKHz },
		AttachDeps: func(spec *vmm.Spec, fn *catalog.Function) { s.functions.AttachDeps(spec, fn) },
		CheckLayer: func(fn *catalog.Function) error { _, err := s.functions.LayerOf(fn); return err },
		CheckBootEnv: func(ctx context.Context, fn *catalog.Function, guest *agent.Conn) error {
			return s.functions.CheckBootEnv(ctx, fn, guest)
		},
		Admit: s.admit, Refuse: s.refuseStart, MarkIdle: func(v ...*catalog.VM) { s.pool.MarkIdle(v...); s.ready.MarkMemory(v...) },
		ForgetPooled: s.forgetPooled, Spans: vmSpans{s}})
}

// refuseStart is why no VM of function may start now, nil if one may.
func (s *Service) refuseStart(function string) error {
	s.mu.Lock()
	closed, deleting := s.closed, s.lifecycle.Deleting(function)
	s.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: daemon is shutting down", ErrConflict)
	}
	if deleting {
		return fmt.Errorf("%w: function %q is being deleted", ErrConflict, function)
	}
	return nil
}

// admit waits until a VM of fn may start (the host budget and fn's own
// concurrency limit); release gives the room back.
func (s *Service) admit(ctx context.Context, fn *catalog.Function) (release func(), err error) {
	ctx, sp := s.span(ctx, SpanAdmission, AttrFunction.String(fn.Name))
	release, err = s.adm.Acquire(ctx, fn.Name, fn.MemoryMiB+s.cfg.VMMemoryOverheadMiB, fn.MaxConcurrency)
	endSpan(sp, err)
	return release, err
}

// vmSpans makes the VM component's spans.
type vmSpans struct{ s *Service }

func (t vmSpans) Boot(ctx context.Context, function string) (context.Context, func(string, error)) {
	ctx, sp := t.s.span(ctx, SpanBoot, AttrFunction.String(function))
	return ctx, func(vm string, err error) {
		if vm != "" {
			sp.SetAttributes(AttrVM.String(vm))
		}
		endSpan(sp, err)
	}
}

func (t vmSpans) VMMStart(ctx context.Context, vm, function string) (context.Context, func(error)) {
	ctx, sp := t.s.span(ctx, SpanVMMStart, AttrVM.String(vm), AttrFunction.String(function))
	return ctx, func(err error) { endSpan(sp, err) }
}

func (t vmSpans) Teardown(ctx context.Context, vm, function, state, reason string) func() {
	_, sp := t.s.span(ctx, SpanTeardown, AttrVM.String(vm), AttrFunction.String(function),
		AttrVMState.String(state), AttrReason.String(reason))
	return func() { sp.End() }
}

// Forwarders to the VM component for the rest of the daemon.

func (s *Service) live(id string) (*liveVM, bool) { return s.vms.Live(id) }

func (s *Service) setState(ctx context.Context, lv *liveVM, state, reason string) {
	s.vms.SetState(ctx, lv, state, reason)
}

func (s *Service) baseSpec(id string, fn *catalog.Function) vmm.Spec { return s.vms.BaseSpec(id, fn) }

func (s *Service) startVM(ctx context.Context, rec *catalog.VM, spec vmm.Spec, fn *catalog.Function, release func()) (*liveVM, error) {
	return s.vms.Start(ctx, rec, spec, fn, release)
}

func (s *Service) stopVM(ctx context.Context, lv *liveVM, state, reason string) {
	s.vms.Stop(ctx, lv, state, reason)
}

func (s *Service) stopReason(lv *liveVM, why string) string { return vms.StopReason(lv, why) }

func (s *Service) withAgent(ctx context.Context, lv *liveVM, timeout time.Duration, fn func(context.Context) error) error {
	return s.vms.WithAgent(ctx, lv, timeout, fn)
}

func (s *Service) lockLive(ctx context.Context, id string, states ...string) (*liveVM, error) {
	return s.vms.Lock(ctx, id, states...)
}

func (s *Service) liveVMWhere(ctx context.Context, match func(*catalog.VM) bool) (*catalog.VM, error) {
	return s.vms.Where(ctx, match)
}

func (s *Service) endVM(ctx context.Context, id, runDir, kill string) error {
	return s.vms.End(ctx, id, runDir, kill)
}

// bootFunction boots a VM of configuration fn for version (BootVM).
func (s *Service) bootFunction(ctx context.Context, fn *catalog.Function, version int) (*catalog.VM, error) {
	return s.vms.Boot(ctx, fn, version)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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
	return s.vms.Boot(ctx, fn, version)
}

// GetVM returns a VM.
func (s *Service) GetVM(ctx context.Context, id string) (*catalog.VM, error) {
	return s.vms.Get(ctx, id)
}

// ListVMs returns every VM.
func (s *Service) ListVMs(ctx context.Context) ([]*catalog.VM, error) { return s.vms.List(ctx) }

// PauseVM stops a running VM's vCPUs.
func (s *Service) PauseVM(ctx context.Context, id string) (*catalog.VM, error) {
	return s.vms.Pause(ctx, id)
}

// ResumeVM restarts a paused VM's vCPUs and sets its clock, which stood
// still while it was paused.
func (s *Service) ResumeVM(ctx context.Context, id string) (*catalog.VM, error) {
	return s.vms.Resume(ctx, id)
}

// DeleteVM stops a VM once what runs on it has finished (no new
// invocation starts on it meanwhile), frees everything it held and forgets
// it.
func (s *Service) DeleteVM(ctx context.Context, id string) error { return s.vms.Delete(ctx, id, "") }

// DeleteVMForce deletes a VM without waiting: its VMM is killed at once,
// and an invocation running on it fails, saying the VM was deleted.
func (s *Service) DeleteVMForce(ctx context.Context, id string) error {
	return s.vms.Delete(ctx, id, vms.WhyForced)
}

// RunningInvocation is the invocation VM id is serving now, nil if none.
func (s *Service) RunningInvocation(id string) *wire.RunningInvocation {
	return s.vms.RunningInvocation(id)
}

// validateConfinement checks the confinement settings of c.
func validateConfinement(c *Config) []error {
	var errs []error
	if c.VMUIDCount == 0 || uint64(c.VMUIDBase)+uint64(c.VMUIDCount) > 1<<32-2 {
		errs = append(errs, fmt.Errorf("vm user ids %d+%d do not fit below 4294967294", c.VMUIDBase, c.VMUIDCount))
	}
	if c.VMUIDBase < 1000 {
		errs = append(errs, fmt.Errorf("vm user id base %d overlaps system users", c.VMUIDBase))
	}
	if c.VMMemoryOverheadMiB < 64 {
		errs = append(errs, fmt.Errorf("vm memory overhead %d MiB is below 64 MiB", c.VMMemoryOverheadMiB))
	}
	if c.VMCPUWeight < 1 || c.VMCPUWeight > 10000 {
		errs = append(errs, fmt.Errorf("vm cpu weight %d is outside 1-10000", c.VMCPUWeight))
	}
	if c.ConsoleLogLimit < 4096 {
		errs = append(errs, fmt.Errorf("console log limit %d bytes is below 4096", c.ConsoleLogLimit))
	}
	if c.CgroupRoot != "" && !strings.HasPrefix(c.CgroupRoot, "/") {
		errs = append(errs, errors.New("cgroup root must be an absolute path"))
	}
	return errs
}

// adoptStoreLeftovers removes the default memory store a daemon that died
// on this data directory left, when this one no longer uses it.
func (s *Service) adoptStoreLeftovers() {
	if s.cfg.StoreDeviceFile != "" || absPath(s.cfg.StoreDir) != store.DefaultDirFor(s.cfg.DataDir) {
		if err := store.RemoveUnusedDefault(s.cfg.DataDir); err != nil {
			s.log.Warn("memory store an earlier daemon left", "err", err)
		}
	}
}

// releaseStore removes the memory store's directory at exit when it holds
// no copy.
func (s *Service) releaseStore() {
	if st := s.snaps.Store(); st != nil {
		if gone, err := st.RemoveIfEmpty(); err != nil {
			s.log.Warn("remove memory store directory", "err", err)
		} else if !gone {
			s.log.Info("memory store kept for the next daemon", "dir", st.Dir())
		}
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
