package vms

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/vmend"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// Start launches the VMM for spec, records the VM and starts supervising
// it. The caller owns the returned VM's lifecycle from then on.
// release gives back the room admission granted it (Deps.Admit), once the
// VM is gone; Start calls it itself when it fails.
func (m *Manager) Start(ctx context.Context, rec *catalog.VM, spec vmm.Spec, fn *catalog.Function, release func()) (*Live, error) {
	if err := m.d.Refuse(fn.Name); err != nil {
		release()
		return nil, err
	}
	rec.RunDir, rec.Accel, rec.MemoryMiB = spec.RunDir, string(spec.Accel), spec.MemoryMiB
	if rec.State == "" {
		rec.State = catalog.StateBooting
	}
	rec.CreatedAt = time.Now()
	if err := m.d.Catalog.PutVM(ctx, rec); err != nil {
		release()
		return nil, err
	}
	mach, unconfine, vnet, err := m.launch(ctx, &spec, fn)
	if err != nil {
		rec.State, rec.Reason = catalog.StateFailed, err.Error()
		_ = m.d.Catalog.PutVM(context.WithoutCancel(ctx), rec)
		release()
		return nil, fmt.Errorf("%w: %v", errdefs.ErrVMFailed, err)
	}
	rec.PID = mach.PID()
	lv := &Live{ID: rec.ID, Fn: fn, Version: rec.Version, M: mach, RunDir: spec.RunDir, state: catalog.StateBooting,
		Spec: spec, unconfine: unconfine, net: vnet, release: release}
	if spec.Memory.Shared {
		lv.MemPath, lv.Shared = spec.Memory.Path, true
	}
	// Recorded before it is live: a delete that finds it live writes last.
	// The process runs: its record must say so even if the request is
	// canceled now (an operation's cancel), and its stop must be recorded.
	err = m.d.Catalog.PutVM(context.WithoutCancel(ctx), rec)
	m.mu.Lock()
	m.live[rec.ID] = lv
	m.mu.Unlock()
	if err != nil {
		m.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, "catalog: "+err.Error())
		return nil, err
	}
	m.wg.Add(1)
	go m.supervise(lv)
	return lv, nil
}

// launch makes spec's run directory, confines it, builds its network and
// starts its VMM; on failure it undoes what it did.
func (m *Manager) launch(ctx context.Context, spec *vmm.Spec, fn *catalog.Function) (vmm.Machine, func(), *vmnet.Net, error) {
	err := os.MkdirAll(spec.RunDir, 0o700)
	var unconfine func() = func() {}
	if err == nil {
		unconfine, err = m.confineSpec(spec)
	}
	var vnet *vmnet.Net
	if err == nil {
		vnet, err = m.attachNet(spec.ID, fn)
	}
	var mach vmm.Machine
	if err == nil {
		spec.Tap = vnet.Tap()
		mach, err = m.d.VMM.Start(ctx, *spec)
	}
	if err != nil {
		if vnet != nil {
			vnet.Close()
		}
		unconfine()
		_ = os.RemoveAll(spec.RunDir)
		return nil, nil, nil, err
	}
	return mach, unconfine, vnet, nil
}

// attachNet builds the VM's network under its function's egress policy.
func (m *Manager) attachNet(vm string, fn *catalog.Function) (*vmnet.Net, error) {
	p, err := vmnet.Policy{Egress: vmnet.Egress(fn.Network.Egress), Services: fn.Network.Services}.Normalize()
	if err != nil {
		return nil, fmt.Errorf("function %s: %w", fn.Name, err)
	}
	if m.net == nil {
		return nil, fmt.Errorf("%w: the host's VM network is not open", errdefs.ErrConflict)
	}
	n, err := m.net.Attach(vm, p)
	if err != nil {
		return nil, err
	}
	m.d.Log.Debug("vm network", "vm", vm, "egress", p.Egress, "services", len(p.Services), "setup_ms", ms(n.SetupTime))
	return n, nil
}

// supervise marks a VM failed when its process exits without thaw asking.
func (m *Manager) supervise(lv *Live) {
	defer m.wg.Done()
	<-lv.M.Done()
	ex := lv.M.Exit()
	if ex.Requested {
		return
	}
	reason := lv.M.Exit().Reason
	m.d.Log.Warn("vm process exited", "vm", lv.ID, "reason", reason)
	m.Stop(context.Background(), lv, catalog.StateFailed, reason)
}

// StopReason stops lv's VMM because of why (a timeout) and says why the
// VM ended: why, and what the guest's console showed before. A VMM that
// ended on its own first has its own reason.
func StopReason(lv *Live, why string) string {
	if err := lv.M.Kill(); err != nil {
		return why + "; " + err.Error()
	}
	ex := lv.M.Exit()
	if !ex.Requested {
		return ex.Reason
	}
	f := ex.Facts
	f.Requested, f.Stop = true, why
	return vmend.Classify(f).String()
}

// Stop kills the process, frees the run directory and records the final
// state. Safe to call more than once.
func (m *Manager) Stop(ctx context.Context, lv *Live, state, reason string) {
	m.mu.Lock()
	_, ok := m.live[lv.ID]
	delete(m.live, lv.ID)
	m.mu.Unlock()
	if !ok {
		return
	}
	defer m.d.Spans.Teardown(ctx, lv.ID, lv.Fn.Name, state, reason)()
	if err := lv.M.Kill(); err != nil {
		m.d.Log.Error("kill vm", "vm", lv.ID, "err", err)
	}
	if lv.Agent != nil {
		lv.Agent.Close()
	}
	if lv.Sess != nil {
		if err := lv.Sess.Close(); err != nil {
			m.d.Log.Warn("close restore session", "vm", lv.ID, "err", err)
		}
	}
	if lv.net != nil {
		lv.net.Close()
	}
	if lv.unconfine != nil {
		lv.unconfine()
	}
	if err := os.RemoveAll(lv.RunDir); err != nil {
		m.d.Log.Error("remove run dir", "vm", lv.ID, "err", err)
	}
	if lv.release != nil {
		lv.release() // the process is gone: its room goes to the next start
	}
	m.SetState(ctx, lv, state, reason)
}

// ConnectAgent dials the agent socket and waits for the guest to answer,
// giving up early if the VMM process dies; it returns the agent's answer.
func (m *Manager) ConnectAgent(ctx context.Context, lv *Live, timeout time.Duration) (*agent.Reply, error) {
	var r *agent.Reply
	err := m.WithAgent(ctx, lv, timeout, func(ctx context.Context) error {
		var err error
		r, err = lv.Agent.WaitReady(ctx, 250*time.Millisecond)
		return err
	})
	return r, err
}

// WithAgent runs fn with lv's agent connection, within timeout, giving up
// early if the VMM process dies.
func (m *Manager) WithAgent(ctx context.Context, lv *Live, timeout time.Duration, fn func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	go func() {
		select {
		case <-lv.M.Done():
			cancel()
		case <-ctx.Done():
		}
	}()
	if lv.Agent == nil {
		lv.Agent = agent.NewConn(lv.M.Agent())
		lv.Agent.SpillTo(m.cfg.ResultsDir)
		lv.Agent.SetMaxLogs(m.cfg.MaxLogBytes)
	}
	err := fn(ctx)
	select {
	case <-lv.M.Done():
		return fmt.Errorf("vm process exited: %s", lv.M.Exit().Reason)
	default:
	}
	return err
}
