package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon/history"
)

// Invocations the guest did not complete (it timed out, or its VM failed)
// answer an error, and are recorded in the history too, with ok false
// and an error saying what happened: an operator looking at
// GET /v1/invocations sees every invocation that reached a guest.

// Error types of the invocations recorded after a platform failure
// (package history).
const (
	ErrorTypeTimeout  = history.ErrorTypeTimeout
	ErrorTypeVMFailed = history.ErrorTypeVMFailed
)

// invokeFailed records inv, which failed with err after it was sent to a
// guest that started at start, if the guest failed it, and returns err.
func (s *Service) invokeFailed(ctx context.Context, inv *Invocation, start time.Time, err error) error {
	return s.history.RecordFailure(ctx, inv, start, err)
}

// timedOut is an invocation timeout's error: what happened (reason, as
// the VM's end was recorded), where the timeout is set, and why the VM is
// gone.
func (s *Service) timedOut(vmID, reason string) error {
	return fmt.Errorf("%w: vm %s: %s; the timeout is thaw invoke --timeout-ms (timeout_ms in the API), by default thawd --invoke-timeout "+
		"(%s on this daemon); the VM was killed (a guest that does not answer cannot be trusted)", ErrTimeout, vmID, reason, s.cfg.InvokeTimeout)
}
