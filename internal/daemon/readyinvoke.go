package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/wire"
)

// A dispatch on a ready clone (package pool keeps them): renewal, then the
// event; on one line if the clone's agent takes that (protocol 6).

// readyNoteKey carries, in a request's context, why no ready clone served
// it, so the invocation that does serve it says so (record).
type readyNoteKey struct{}

func readyNoteOf(ctx context.Context) *wire.ReadyNote {
	n, _ := ctx.Value(readyNoteKey{}).(*wire.ReadyNote)
	return n
}

// invokeReady serves a pooled invocation on a ready clone of key if one is
// ready. If none serves it, inv and err are nil and the context returned
// carries why, for the path that serves it instead (and says so). A clone
// found dead or failing its renewal is stopped, never used: the request
// falls back, unless the clone had the event already (agent.ErrEventSent):
// then the request fails, so that no event runs twice.
func (s *Service) invokeReady(ctx context.Context, key poolKey, tk *readyTicket, event json.RawMessage, timeout time.Duration, start time.Time, target Target) (*Invocation, context.Context, error) {
	if !s.ready.On() {
		return nil, ctx, nil
	}
	miss := func(outcome, why string) (*Invocation, context.Context, error) {
		tk.Missed()
		s.ready.Outcome(outcome, 0)
		return nil, context.WithValue(ctx, readyNoteKey{}, &wire.ReadyNote{Fallback: why}), nil
	}
	rc, dead := s.ready.Take(key)
	if rc == nil {
		if dead != "" {
			return miss("failed", dead)
		}
		return miss("miss", "none ready")
	}
	defer s.ready.Dispatch(tk)() // its replacement starts once the request is done
	lv := rc.VM
	lv.Mu.Lock()
	unlock := true // false once a teardown after the answer holds the lock
	defer func() {
		if unlock {
			lv.Mu.Unlock()
		}
	}()
	waited := time.Since(rc.Since())
	t0 := time.Now()
	s.vms.Mark(lv, catalog.StateRunning) // the catalog learns it if the VM outlives the request
	var renewal *agent.Reply
	var pending *agent.Pending
	err := s.withAgent(ctx, lv, s.cfg.BootTimeout, func(ctx context.Context) (err error) {
		renewal, pending, err = s.renewReady(ctx, lv, event)
		return err
	})
	if err != nil {
		if pending != nil { // the VM exited after its renewal: it is stopped below
			pending.Abandon()
		}
		why := fmt.Sprintf("ready clone %s failed its renewal: %v", lv.ID, err)
		s.stopVM(context.WithoutCancel(ctx), lv, catalog.StateFailed, why)
		if errors.Is(err, agent.ErrEventSent) { // the event may have run there: never run it twice
			s.ready.Outcome("failed", 0)
			return nil, ctx, fmt.Errorf("%w: %s; the event may have begun there, so it was not run again", ErrVMFailed, why)
		}
		return miss("failed", why)
	}
	renewed := time.Since(t0)
	s.ready.Outcome("hit", waited.Seconds())
	inv := &Invocation{ID: newID("inv-"), Function: rc.Rec.Function, VM: lv.ID, Mode: "ready",
		Snapshot: key.Snapshot, Strategy: rc.Rec.Strategy, Version: rc.Rec.Version, Alias: target.Alias}
	inv.Timing.Ready = &wire.ReadyNote{Hit: true, WaitedMS: ms(waited), RenewMS: ms(renewed), TakeMS: ms(t0.Sub(start)),
		RenewGuestMS: renewal.DurationMS, RenewSteps: renewal.Steps}
	annotate(ctx, invocationAttrs(inv)...)
	lv.CountersAtResume, _ = procstat.Read(lv.M.PID())
	lv.TraceAtResume, lv.DaemonTraceStart = s.traceOf(lv.M.PID()), s.traceOf(os.Getpid())
	if err := s.invokeWith(ctx, lv, inv, timeout, pending.Wait); err != nil {
		return nil, ctx, s.invokeFailed(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	rc.Rec.State = catalog.StateRunning
	if s.park(lv, rc.Rec, key.Snapshot) { // the function reuses VMs (keep-alive)
		s.setState(ctx, lv, catalog.StateRunning, "")
	} else {
		unlock = !s.tearDownAfter(ctx, lv, rc.Rec)
	}
	s.record(ctx, inv)
	s.log.Info("ready invocation", "invocation", inv.ID, "vm", inv.VM, "function", inv.Function, "ok", inv.OK,
		"waited_ms", inv.Timing.Ready.WaitedMS, "renew_ms", inv.Timing.Ready.RenewMS, "invoke_ms", inv.Timing.InvokeMS,
		"total_ms", inv.Timing.TotalMS, "one_round_trip", lv.Agent.Protocol() >= agent.ReadyProtocol)
	return inv, ctx, nil
}

// renewReady renews a ready clone for a request (renewClone's renewal,
// the hook included) and sends it the event: on the renewal's line if its
// agent takes that, so the invocation begins as the renewal ends and the
// request waits for one round trip; else once the renewal is answered.
// The invocation's answer is pending's. An agent that refuses the renewal
// runs no invocation.
func (s *Service) renewReady(ctx context.Context, lv *liveVM, event json.RawMessage) (*agent.Reply, *agent.Pending, error) {
	rn, err := s.renewal(lv, true)
	if err != nil {
		return nil, nil, err
	}
	r, pending, err := lv.Agent.RenewAndInvoke(ctx, rn, lv.Fn.Name, event)
	if err != nil {
		return nil, nil, err
	}
	s.renewed(lv, r)
	return r, pending, nil
}

// tearDownAfter stops a hit's clone in the background, so that the answer
// does not wait for it; the goroutine takes over the caller's lock of lv
// and releases it once the VM is gone (no one else gets it meanwhile); the
// catalog lists it running until then.
// false if the daemon is closing: then it stopped the VM before returning.
func (s *Service) tearDownAfter(ctx context.Context, lv *liveVM, rec *catalog.VM) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.tearDownCold(ctx, lv, rec)
		return false
	}
	s.wg.Add(1) // under s.mu: Close waits only once closed is set
	s.mu.Unlock()
	s.setState(ctx, lv, catalog.StateRunning, "") // listed running, not ready, until it is gone
	go func() {
		defer s.wg.Done()
		defer lv.Mu.Unlock()
		s.tearDownCold(context.WithoutCancel(ctx), lv, rec)
	}()
	return true
}
