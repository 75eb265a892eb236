package ops

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Cancel cancels a running operation: its work's context ends, and once
// the work has stopped (within the registry's cancel wait, or until ctx
// ends) the operation is returned, failed with a cancellation (499
// canceled) unless the work had finished first. What the work made before
// it stopped is the work's to clean up, as after any failure of it. An
// operation that has ended is a conflict.
func (r *Registry) Cancel(ctx context.Context, id string) (*Operation, error) {
	o, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	rid := requestID(ctx)
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
		return nil, fmt.Errorf("%w: operation %s has already %s", errdefs.ErrConflict, id, state)
	}
	r.log.Info("operation canceled", "operation", id, "request_id", rid)
	o.cancel()
	t := time.NewTimer(r.cancelWait)
	defer t.Stop()
	select {
	case <-o.done:
	case <-ctx.Done():
	case <-t.C:
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
	return &canceledError{by: by, cause: err}
}

// canceledError is a canceled operation's error: context.Canceled (499
// canceled), saying who canceled it and where its work stopped.
type canceledError struct {
	by    string
	cause error
}

func (e *canceledError) Error() string {
	return fmt.Sprintf("operation canceled (request %s); the work stopped at: %v", e.by, e.cause)
}

// Is makes the error context.Canceled, and only that: the work's own
// error (a VM failing as its boot was stopped) is not the operation's.
func (e *canceledError) Is(target error) bool { return target == context.Canceled }
