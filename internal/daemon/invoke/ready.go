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
	"github.com/thaw-dev/thaw/wire"
)

// A dispatch on a ready clone (the daemon's pool keeps them): renewal,
// then the event; on one line if the clone's agent takes that (protocol 6).
// Else a VM kept idle from an earlier invocation serves the request.

// ReadyKey names the ready clones a request may take: its snapshot's,
// restored with Kind, or with any strategy under Auto.
type ReadyKey struct {
	Snapshot string
	Kind     restore.Kind
	Auto     bool
}

// Ready is the ready clones' pool as a request uses it.
type Ready interface {
	// On: the daemon keeps ready clones.
	On() bool
	// Begin counts a request that could take a ready clone of key.
	Begin(key ReadyKey) Ticket
	// Outcome counts a request's outcome ("hit", "miss", "failed") and,
	// for a hit, how long its clone waited.
	Outcome(outcome string, waitedS float64)
}

// Ticket is a request that could take a ready clone.
type Ticket interface {
	// Take hands out the oldest live ready clone of the ticket's key, or
	// nil; dead says why a clone taken on the way was not live.
	Take() (c *Clone, dead string)
	// Missed: no ready clone serves the request, which goes on without.
	Missed()
	// Dispatch: the request runs on the clone taken; done once it ends.
	Dispatch() (done func())
	// End records the request's end.
	End()
}

// Clone is a ready clone taken for a request.
type Clone struct {
	VM    *vms.Live
	Rec   *catalog.VM
	Since time.Time // ready since
}

// readyNoteKey carries, in a request's context, why no ready clone served
// it, so the invocation that does serve it says so (Deps.Record).
type readyNoteKey struct{}

// ReadyNoteOf is why no ready clone served ctx's request, nil if none
// was missed.
func ReadyNoteOf(ctx context.Context) *wire.ReadyNote {
	n, _ := ctx.Value(readyNoteKey{}).(*wire.ReadyNote)
	return n
}

// invokeReady serves a pooled invocation on a ready clone of key if one is
// ready. If none serves it, inv and err are nil and the context returned
// carries why, for the path that serves it instead (and says so). A clone
// found dead or failing its renewal is stopped, never used: the request
// falls back, unless the clone had the event already (agent.ErrEventSent):
// then the request fails, so that no event runs twice.
func (v *Invoker) invokeReady(ctx context.Context, key ReadyKey, tk Ticket, event json.RawMessage, timeout time.Duration, start time.Time, target Target) (*wire.Invocation, context.Context, error) {
	if !v.d.Ready.On() {
		return nil, ctx, nil
	}
	miss := func(outcome, why string) (*wire.Invocation, context.Context, error) {
		tk.Missed()
		v.d.Ready.Outcome(outcome, 0)
		return nil, context.WithValue(ctx, readyNoteKey{}, &wire.ReadyNote{Fallback: why}), nil
	}
	rc, dead := tk.Take()
	if rc == nil {
		if dead != "" {
			return miss("failed", dead)
		}
		return miss("miss", "none ready")
	}
	defer tk.Dispatch()() // its replacement starts once the request is done
	lv := rc.VM
	lv.Mu.Lock()
	unlock := true // false once a teardown after the answer holds the lock
	defer func() {
		if unlock {
			lv.Mu.Unlock()
		}
	}()
	waited := time.Since(rc.Since)
	t0 := time.Now()
	v.d.VMs.Mark(lv, catalog.StateRunning) // the catalog learns it if the VM outlives the request
	renewal, pending, err := v.renewReady(ctx, lv, event)
	if err != nil {
		why := fmt.Sprintf("ready clone %s failed its renewal: %v", lv.ID, err)
		v.d.VMs.Stop(context.WithoutCancel(ctx), lv, catalog.StateFailed, why)
		if errors.Is(err, agent.ErrEventSent) { // the event may have run there: never run it twice
			v.d.Ready.Outcome("failed", 0)
			return nil, ctx, fmt.Errorf("%w: %s; the event may have begun there, so it was not run again", errdefs.ErrVMFailed, why)
		}
		return miss("failed", why)
	}
	renewed := time.Since(t0)
	v.d.Ready.Outcome("hit", waited.Seconds())
	inv := &wire.Invocation{ID: NewID(), Function: rc.Rec.Function, VM: lv.ID, Mode: "ready",
		Snapshot: key.Snapshot, Strategy: rc.Rec.Strategy, Version: rc.Rec.Version, Alias: target.Alias}
	inv.Timing.Ready = &wire.ReadyNote{Hit: true, WaitedMS: ms(waited), RenewMS: ms(renewed), TakeMS: ms(t0.Sub(start)),
		RenewGuestMS: renewal.DurationMS, RenewSteps: renewal.Steps}
	v.d.Tracing.Annotate(ctx, inv)
	v.markResume(lv)
	if err := v.invokeWith(ctx, lv, inv, timeout, pending.Wait); err != nil {
		return nil, ctx, v.d.RecordFailure(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	rc.Rec.State = catalog.StateRunning
	if v.d.Park(lv, rc.Rec, key.Snapshot) { // the function reuses VMs (keep-alive)
		v.d.VMs.SetState(ctx, lv, catalog.StateRunning, "")
	} else {
		unlock = !v.tearDownAfter(ctx, lv, rc.Rec)
	}
	v.d.Record(ctx, inv)
	v.log.Info("ready invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "ok", inv.OK,
		"waited_ms", inv.Timing.Ready.WaitedMS, "renew_ms", inv.Timing.Ready.RenewMS, "invoke_ms", inv.Timing.InvokeMS,
		"total_ms", inv.Timing.TotalMS, "one_round_trip", lv.Agent.Protocol() >= agent.ReadyProtocol)
	return inv, ctx, nil
}

// renewReady renews a ready clone for a request (the clone's renewal, the
// hook included) and sends it the event, within the boot timeout: on the
// renewal's line if its agent takes that, so the invocation begins as the
// renewal ends and the request waits for one round trip; else once the
// renewal is answered. The invocation's answer is pending's. An agent that
// refuses the renewal runs no invocation.
func (v *Invoker) renewReady(ctx context.Context, lv *vms.Live, event json.RawMessage) (*agent.Reply, *agent.Pending, error) {
	var renewal *agent.Reply
	var pending *agent.Pending
	err := v.d.VMs.WithAgent(ctx, lv, v.cfg.BootTimeout, func(ctx context.Context) error {
		rn, err := v.d.Restore.Renewal(lv, true)
		if err != nil {
			return err
		}
		if renewal, pending, err = lv.Agent.RenewAndInvoke(ctx, rn, lv.Fn.Name, event); err != nil {
			return err
		}
		v.d.Restore.Renewed(lv, renewal)
		return nil
	})
	if err != nil && pending != nil { // the VM exited after its renewal: it is stopped next
		pending.Abandon()
	}
	if err != nil {
		return nil, nil, err
	}
	return renewal, pending, nil
}

// tearDownAfter stops a hit's clone in the background, so that the answer
// does not wait for it; the goroutine takes over the caller's lock of lv
// and releases it once the VM is gone (no one else gets it meanwhile); the
// catalog lists it running until then.
// false if the daemon is closing: then it stopped the VM before returning.
func (v *Invoker) tearDownAfter(ctx context.Context, lv *vms.Live, rec *catalog.VM) bool {
	release, ok := v.d.Hold()
	if !ok {
		v.TearDown(ctx, lv, rec)
		return false
	}
	v.d.VMs.SetState(ctx, lv, catalog.StateRunning, "") // listed running, not ready, until it is gone
	go func() {
		defer release()
		defer lv.Mu.Unlock()
		v.TearDown(context.WithoutCancel(ctx), lv, rec)
	}()
	return true
}

// invokeKept runs an invocation on an idle VM of the pool and keeps the VM
// again (or stops it if the pool is full or the function opted out).
func (v *Invoker) invokeKept(ctx context.Context, k *Kept, event json.RawMessage, timeout time.Duration, start time.Time, target Target) (*wire.Invocation, error) {
	k.VM.Mu.Lock()
	inv := &wire.Invocation{ID: NewID(), Function: k.Rec.Function, VM: k.Rec.ID, Mode: "pooled",
		Snapshot: k.Snapshot, Strategy: k.Rec.Strategy, Version: k.Rec.Version, Alias: target.Alias}
	v.d.Tracing.Annotate(ctx, inv)
	err := v.Locked(ctx, k.VM, inv, event, timeout)
	kept := err == nil && v.d.Park(k.VM, k.Rec, k.Snapshot)
	k.VM.Mu.Unlock()
	if !kept {
		v.d.Retire(context.WithoutCancel(ctx), k.VM, k.Rec, "pooled invocation finished")
	}
	if err != nil {
		return nil, v.d.RecordFailure(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	v.d.Record(ctx, inv)
	v.log.Info("pooled invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "ok", inv.OK,
		"invoke_ms", inv.Timing.InvokeMS, "total_ms", inv.Timing.TotalMS)
	return inv, nil
}
