package ops

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/wire"
)

// A canceled operation's work sees its context end, and the operation
// fails with context.Canceled naming the canceling request and where the
// work stopped, not the work's own error kind; an ended one is a conflict.
func TestCancel(t *testing.T) {
	r := newRegistry(t)
	stopped := errors.Join(errdefs.ErrVMFailed, errors.New("boot stopped at booting"))
	op, err := r.Start(WithRequestID(context.Background(), "req-start"), wire.OpBoot, "echo", func(ctx context.Context) (*wire.OperationResult, error) {
		progress.Phase(ctx, "booting")
		<-ctx.Done()
		return nil, stopped
	})
	if err != nil {
		t.Fatal(err)
	}
	waitPhase(t, r, op.ID, "booting")
	got, err := r.Cancel(WithRequestID(context.Background(), "req-cancel"), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != wire.OpFailed || !errors.Is(got.Err, context.Canceled) || errors.Is(got.Err, errdefs.ErrVMFailed) ||
		got.Err.Error() != "operation canceled (request req-cancel); the work stopped at: "+stopped.Error() {
		t.Fatalf("canceled operation: %s, %v", got.State, got.Err)
	}
	if _, err := r.Cancel(context.Background(), op.ID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "already failed") {
		t.Errorf("second cancel: %v", err)
	}
	done, _ := r.Start(context.Background(), wire.OpBoot, "echo", func(context.Context) (*wire.OperationResult, error) { return &wire.OperationResult{}, nil })
	if _, err := r.WaitFor(context.Background(), done.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Cancel(context.Background(), done.ID); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "already succeeded") {
		t.Errorf("cancel of a finished operation: %v", err)
	}
}

// Work that ignores its cancellation is waited for only the cancel wait,
// and a cancel without a request id says so; work that succeeds although
// canceled keeps its success.
func TestCancelWaitBounded(t *testing.T) {
	r := newRegistry(t)
	r.cancelWait = 50 * time.Millisecond
	release := make(chan struct{})
	op, err := r.Start(context.Background(), wire.OpStore, "snap", func(context.Context) (*wire.OperationResult, error) {
		<-release
		return &wire.OperationResult{}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	got, err := r.Cancel(context.Background(), op.ID)
	if err != nil || got.State != wire.OpRunning || time.Since(t0) < r.cancelWait {
		t.Fatalf("cancel of stuck work: %+v %v after %s", got, err, time.Since(t0))
	}
	close(release)
	done, err := r.WaitFor(context.Background(), op.ID)
	if err != nil || done.State != wire.OpSucceeded || done.Err != nil {
		t.Fatalf("work that finished despite its cancel: %+v %v", done, err)
	}
	failing, _ := r.Start(context.Background(), wire.OpStore, "snap", func(ctx context.Context) (*wire.OperationResult, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if got, err := r.Cancel(context.Background(), failing.ID); err != nil || !strings.Contains(got.Err.Error(), "request unknown") {
		t.Errorf("cancel by no request: %+v %v", got, err)
	}
}
