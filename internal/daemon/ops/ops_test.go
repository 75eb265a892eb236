package ops

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/wire"
)

func newRegistry(t *testing.T) *Registry {
	t.Helper()
	r := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(func() { r.Shutdown(); r.Wait() })
	return r
}

// waitPhase polls an operation until its phase is phase.
func waitPhase(t *testing.T, r *Registry, id, phase string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		op, err := r.Get(id)
		if err != nil {
			t.Fatal(err)
		}
		if op.Progress.Phase == phase {
			return
		}
		if op.State != wire.OpRunning || time.Now().After(deadline) {
			t.Fatalf("operation %s is %s in phase %q, never reached %q", id, op.State, op.Progress.Phase, phase)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// An operation outlives the request that started it, keeps its request
// id and values, reports progress and ends with its work's result; it can
// be listed, read and forgotten once finished.
func TestOperationLifecycle(t *testing.T) {
	r := newRegistry(t)
	type key struct{}
	release := make(chan struct{})
	ctx, cancel := context.WithCancel(context.WithValue(WithRequestID(context.Background(), "req-1"), key{}, "caller"))
	op, err := r.Start(ctx, wire.OpBoot, "echo", func(ctx context.Context) (*wire.OperationResult, error) {
		if ctx.Value(key{}) != "caller" {
			return nil, errors.New("the caller's values were lost")
		}
		progress.Report(ctx, wire.OperationProgress{Phase: "booting", Done: 1, Total: 2, Unit: "steps"})
		<-release
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return &wire.OperationResult{VM: &wire.VM{ID: "vm-000000000001"}}, nil
	})
	cancel() // the request is gone
	if err != nil {
		t.Fatal(err)
	}
	if op.Kind != wire.OpBoot || op.Target != "echo" || op.State != wire.OpRunning || op.RequestID != "req-1" ||
		!opIDRE.MatchString(op.ID) || op.Progress.Phase == "" {
		t.Fatalf("started %+v", op)
	}
	waitPhase(t, r, op.ID, "booting")
	if got, _ := r.Get(op.ID); got.Progress.Done != 1 || got.Progress.Total != 2 || got.Progress.Unit != "steps" {
		t.Errorf("progress %+v", got.Progress)
	}
	if err := r.Delete(op.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("delete of a running operation: %v", err)
	}
	close(release)
	done, err := r.WaitFor(context.Background(), op.ID)
	if err != nil {
		t.Fatal(err)
	}
	if done.State != wire.OpSucceeded || done.Err != nil || done.Result == nil || done.Result.VM.ID != "vm-000000000001" ||
		done.Progress.Phase != "done" || done.UpdatedAt.Before(done.CreatedAt) {
		t.Fatalf("finished %+v (%v)", done, done.Err)
	}
	if list := r.List(); len(list) != 1 || list[0].ID != op.ID {
		t.Errorf("list %+v", list)
	}
	if err := r.Delete(op.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get(op.ID); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "kept for 1h0m0s") {
		t.Errorf("deleted operation: %v", err)
	}
	if _, err := r.Get("op-nope"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("malformed id: %v", err)
	}
	for _, call := range []func(string) error{
		func(id string) error { _, err := r.WaitFor(context.Background(), id); return err },
		func(id string) error { _, err := r.Cancel(context.Background(), id); return err },
		r.Delete,
	} {
		if err := call("op-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("unknown id: %v", err)
		}
	}
}

// A failed work fails its operation with the work's error; a wait whose
// context ends returns the context's error and leaves the work running.
func TestOperationFails(t *testing.T) {
	r := newRegistry(t)
	boom := fmt.Errorf("%w: no such device", errdefs.ErrVMFailed)
	op, err := r.Start(context.Background(), wire.OpCopy, "snap", func(context.Context) (*wire.OperationResult, error) { return nil, boom })
	if err != nil {
		t.Fatal(err)
	}
	done, err := r.WaitFor(context.Background(), op.ID)
	if err != nil || done.State != wire.OpFailed || done.Result != nil || !errors.Is(done.Err, errdefs.ErrVMFailed) {
		t.Fatalf("finished %+v: %v", done, err)
	}
	hold := make(chan struct{})
	defer close(hold)
	slow, err := r.Start(context.Background(), wire.OpCopy, "snap", func(context.Context) (*wire.OperationResult, error) { <-hold; return nil, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := r.WaitFor(ctx, slow.ID); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a wait that timed out: %v", err)
	}
	if v, _ := r.Get(slow.ID); v.State != wire.OpRunning {
		t.Errorf("the work stopped with its waiter: %+v", v)
	}
}

// Listing answers oldest first, the id breaking ties.
func TestOperationsListed(t *testing.T) {
	r := newRegistry(t)
	at := time.Now()
	r.now = func() time.Time { return at }
	var ids []string
	for range 3 {
		op, err := r.Start(context.Background(), wire.OpGC, "bucket", func(context.Context) (*wire.OperationResult, error) { return nil, nil })
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, op.ID)
	}
	at = at.Add(time.Second)
	last, _ := r.Start(context.Background(), wire.OpGC, "bucket", func(context.Context) (*wire.OperationResult, error) { return nil, nil })
	list := r.List()
	if len(list) != 4 || list[3].ID != last.ID {
		t.Fatalf("list %+v", list)
	}
	for i := 1; i < 3; i++ {
		if list[i-1].ID >= list[i].ID {
			t.Errorf("same start, ids out of order: %s before %s", list[i-1].ID, list[i].ID)
		}
	}
}

// Shutting down fails running operations at once, cancels their work,
// keeps a late outcome from replacing the failure, and refuses new ones.
func TestOperationsShutdown(t *testing.T) {
	r := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	started := make(chan struct{})
	op, err := r.Start(context.Background(), wire.OpPrepare, "echo", func(ctx context.Context) (*wire.OperationResult, error) {
		close(started)
		<-ctx.Done()
		return &wire.OperationResult{}, nil // a late success is dropped
	})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	r.Shutdown()
	waited := make(chan struct{})
	go func() { r.Wait(); close(waited) }()
	polltest.Receive(t, waited, 10*time.Second, "the work to stop at shutdown")
	done, err := r.Get(op.ID)
	if err != nil || done.State != wire.OpFailed || !errors.Is(done.Err, errdefs.ErrConflict) || !strings.Contains(done.Err.Error(), "shut down") {
		t.Fatalf("after shutdown: %+v (%v)", done, err)
	}
	if _, err := r.Start(context.Background(), wire.OpPrepare, "echo", func(context.Context) (*wire.OperationResult, error) { return nil, nil }); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("an operation started after shutdown: %v", err)
	}
}

// Finished operations expire after OperationTTL and only the newest
// MaxFinishedOperations are kept; running ones are never dropped.
func TestOperationRetention(t *testing.T) {
	now := time.Now()
	r := New(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.now = func() time.Time { return now }
	add := func(id, state string, at time.Time) {
		r.byID[id] = &operation{v: Operation{Operation: wire.Operation{ID: id, State: state, UpdatedAt: at}}, done: make(chan struct{})}
	}
	add("op-old", wire.OpSucceeded, now.Add(-OperationTTL-time.Second))
	add("op-oldrunning", wire.OpRunning, now.Add(-2*OperationTTL))
	for i := range MaxFinishedOperations + 5 {
		add(fmt.Sprintf("op-%d", i), wire.OpFailed, now.Add(-time.Duration(i)*time.Second))
	}
	r.pruneLocked(now)
	if _, ok := r.byID["op-old"]; ok {
		t.Error("an expired operation was kept")
	}
	if _, ok := r.byID["op-oldrunning"]; !ok {
		t.Error("a running operation was dropped")
	}
	if len(r.byID) != MaxFinishedOperations+1 {
		t.Errorf("%d kept, want %d finished and the running one", len(r.byID), MaxFinishedOperations)
	}
	for i := range 5 {
		if _, ok := r.byID[fmt.Sprintf("op-%d", MaxFinishedOperations+i)]; ok {
			t.Errorf("op-%d, among the oldest, was kept", MaxFinishedOperations+i)
		}
	}
}
