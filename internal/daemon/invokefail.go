package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// Invocations the guest did not complete (it timed out, or its VM failed)
// answer an error, and are recorded in the history too, with ok false
// and an error saying what happened: an operator looking at
// GET /v1/invocations sees every invocation that reached a guest.

// Error types of the invocations recorded after a platform failure (a
// handler's own exceptions carry their Python type).
const (
	ErrorTypeTimeout  = "Timeout"
	ErrorTypeVMFailed = "VMFailed"
)

// invokeFailed records inv, which failed with err after it was sent to a
// guest that started at start, and returns err.
func (s *Service) invokeFailed(ctx context.Context, inv *Invocation, start time.Time, err error) error {
	typ := ""
	switch {
	case errors.Is(err, ErrTimeout):
		typ = ErrorTypeTimeout
	case errors.Is(err, ErrVMFailed):
		typ = ErrorTypeVMFailed
	default:
		return err // not the guest's: the registry, the caller going away
	}
	inv.OK, inv.Result = false, nil
	inv.Error = &wire.FunctionError{Type: typ, Message: err.Error()}
	inv.Timing.TotalMS = ms(time.Since(start))
	rec := &catalog.Invocation{ID: inv.ID, Function: inv.Function, VM: inv.VM, Snapshot: inv.Snapshot,
		Strategy: inv.Strategy, OK: false, Detail: s.historyDetail(inv), CreatedAt: time.Now()}
	if perr := s.db.PutInvocation(context.WithoutCancel(ctx), rec); perr != nil {
		s.log.Error("record failed invocation", "invocation", inv.ID, "err", perr)
	}
	if s.recorded.Add(1)%pruneEvery == 0 {
		s.pruneHistory(context.WithoutCancel(ctx))
	}
	return err
}

// timedOut is an invocation timeout's error: what happened (reason, as
// the VM's end was recorded), where the timeout is set, and why the VM is
// gone.
func (s *Service) timedOut(vmID, reason string) error {
	return fmt.Errorf("%w: vm %s: %s; the timeout is thaw invoke --timeout-ms (timeout_ms in the API), by default thawd --invoke-timeout "+
		"(%s on this daemon); the VM was killed (a guest that does not answer cannot be trusted)", ErrTimeout, vmID, reason, s.cfg.InvokeTimeout)
}
