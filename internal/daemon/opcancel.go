package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// cancelWait bounds how long CancelOperation waits for the work to stop.
var cancelWait = 30 * time.Second

// CancelOperation cancels a running operation: its work's context ends,
// and once the work has stopped (within cancelWait, or until ctx ends)
// the operation is returned, failed with a cancellation (499 canceled)
// unless the work had finished first. What the work made before it
// stopped is cleaned up as after any failure of that work. An operation
// that has ended is a conflict.
func (s *Service) CancelOperation(ctx context.Context, id string) (*Operation, error) {
	if _, err := s.Operation(ctx, id); err != nil {
		return nil, err
	}
	s.ops.mu.Lock()
	o, ok := s.ops.byID[id]
	s.ops.mu.Unlock()
	if !ok {
		return s.Operation(ctx, id)
	}
	rid, _ := ctx.Value(requestIDKey{}).(string)
	o.mu.Lock()
	state := o.v.State
	if state == wire.OpRunning && o.canceledBy == "" {
		o.canceledBy = rid
		if rid == "" {
			o.canceledBy = "unknown"
		}
	}
	o.mu.Unlock()
	if state != wire.OpRunning {
		return nil, fmt.Errorf("%w: operation %s has already %s", ErrConflict, id, state)
	}
	s.log.Info("operation canceled", "operation", id, "request_id", rid)
	o.cancel()
	select {
	case <-o.done:
	case <-ctx.Done():
	case <-time.After(cancelWait):
	}
	v := o.snapshot()
	return &v, nil
}

// canceledErr is the error a canceled operation ends with: the
// cancellation, and where the work stopped.
func (o *operation) canceledErr(err error) error {
	o.mu.Lock()
	by := o.canceledBy
	o.mu.Unlock()
	if err == nil || by == "" {
		return err
	}
	return fmt.Errorf("%w: operation canceled (request %s); the work stopped at: %v", context.Canceled, by, err)
}
