package invoke

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/wire"
)

// Invocations the guest did not complete (it timed out, or its VM failed)
// answer an error, and are recorded in the history too (Deps.RecordFailure),
// with ok false and an error saying what happened: an operator looking at
// GET /v1/invocations sees every invocation that reached a guest.

// guestFailed ends an invocation whose guest answered err instead: a VM a
// delete killed says so; otherwise the VM is stopped, failed, and the
// error says why (the strategy, the timeout, the VMM's exit, the agent).
func (v *Invoker) guestFailed(ctx context.Context, lv *vms.Live, inv *wire.Invocation, timeout time.Duration, err error) error {
	if err := v.killedDuring(ctx, lv, inv); err != nil { // a delete killed the VM
		return err
	}
	var reason string
	kind := errdefs.ErrVMFailed
	switch why := lv.StrategyFailed.Load(); {
	case why != nil: // the strategy stopped serving memory and the VM was killed
		reason = fmt.Sprintf("%s strategy failed during the invocation: %s", lv.Sess.Kind(), *why)
	case errors.Is(err, agent.ErrTimeout) && ctx.Err() == nil:
		reason = vms.StopReason(lv, fmt.Sprintf("invocation timed out after %s; guest killed", timeout))
		kind = errdefs.ErrTimeout
	case lv.Exited() || errors.Is(err, io.EOF) && ExitsWithin(lv, time.Second):
		// An agent channel closing at EOF is QEMU going away: wait for
		// it, so the reason says why (the guest's memory, a crash).
		reason = "vm process exited during the invocation: " + lv.M.Exit().Reason
	default:
		reason = vms.StopReason(lv, fmt.Sprintf("guest agent failed during the invocation: %v; guest killed", err))
	}
	v.d.VMs.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, reason)
	if err := v.d.LazyFailure(lv); err != nil { // the registry, not the VM, failed
		return err
	}
	if kind == errdefs.ErrTimeout {
		return v.timedOut(lv.ID, reason)
	}
	return fmt.Errorf("%w: vm %s: %s", kind, lv.ID, reason)
}

// VMDeletedError is the error type the invocation history records for an
// invocation whose VM was deleted while it ran.
const VMDeletedError = "VMDeleted"

// killedDuring is the error of an invocation whose VMM a delete killed,
// nil if none did. The invocation is recorded in the history, failed,
// with the reason.
func (v *Invoker) killedDuring(ctx context.Context, lv *vms.Live, inv *wire.Invocation) error {
	why := lv.KilledBy.Load()
	if why == nil {
		return nil
	}
	reason := fmt.Sprintf("%s %s into the invocation, which did not finish", *why,
		(time.Duration(inv.Timing.InvokeMS*1e3) * time.Microsecond).Round(time.Millisecond))
	inv.OK, inv.Result = false, nil
	inv.Error = &wire.FunctionError{Type: VMDeletedError, Message: "vm " + lv.ID + " " + reason}
	inv.Timing.TotalMS = inv.Timing.InvokeMS
	if inv.Mode != "record" { // a prepare's record runs are not the history's
		v.d.Record(ctx, inv)
	}
	v.log.Info("invocation ended by a delete", "invocation", inv.ID, "vm", lv.ID, "function", inv.Function, "reason", reason)
	return fmt.Errorf("%w: vm %s: %s", errdefs.ErrConflict, lv.ID, reason)
}

// timedOut is an invocation timeout's error: what happened (reason, as
// the VM's end was recorded), where the timeout is set, and why the VM is
// gone.
func (v *Invoker) timedOut(vmID, reason string) error {
	return fmt.Errorf("%w: vm %s: %s; the timeout is thaw invoke --timeout-ms (timeout_ms in the API), by default thawd --invoke-timeout "+
		"(%s on this daemon); the VM was killed (a guest that does not answer cannot be trusted)", errdefs.ErrTimeout, vmID, reason, v.cfg.InvokeTimeout)
}

// ExitsWithin waits up to d for lv's VMM to exit.
func ExitsWithin(lv *vms.Live, d time.Duration) bool {
	select {
	case <-lv.M.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// TraceOf is process pid's tracepoint counters (zero when tracing is off).
func (v *Invoker) TraceOf(pid int) faulttrace.Counters {
	f := v.d.Faults()
	if f == nil {
		return faulttrace.Counters{}
	}
	c, _ := f.Read(pid)
	return c
}

// faultTrace is what the tracepoints counted for the VMM from the vCPUs
// resuming (cold) or the request (warm) to the answer, and for the daemon
// from the restore (or request) to the answer.
func (v *Invoker) faultTrace(lv *vms.Live) *wire.FaultTrace {
	vmm := v.TraceOf(lv.M.PID()).Sub(lv.TraceAtResume)
	d := v.TraceOf(os.Getpid()).Sub(lv.DaemonTraceStart)
	return &wire.FaultTrace{VMMFaults: vmm.Faults, VMMReadRequests: vmm.ReadBios, VMMReadBytes: vmm.ReadBytes,
		VMMBlockedMS: vmm.BlockedMS(), VMMBlockedWaits: vmm.Blocked,
		DaemonReadRequests: d.ReadBios, DaemonReadBytes: d.ReadBytes}
}
