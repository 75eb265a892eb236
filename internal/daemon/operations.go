package daemon

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// Operation retention: finished operations are kept in memory for
// OperationTTL, at most MaxFinishedOperations of them (the newest).
// Nothing about them survives a restart; their work's effects (VMs,
// snapshots, catalog rows, store copies) do.
const (
	OperationTTL          = time.Hour
	MaxFinishedOperations = 1000
)

// Operation is an asynchronous operation as the daemon keeps it: the wire
// document without its error, which the API renders from Err (only the API
// maps errors to statuses).
type Operation struct {
	wire.Operation
	Err       error  // why it failed
	RequestID string // the request that started it
}

// operation is one running or finished operation.
type operation struct {
	mu     sync.Mutex
	v      Operation
	cancel context.CancelFunc
	done   chan struct{}
	// canceledBy is the request that canceled the operation ("": none).
	canceledBy string
}

func (o *operation) snapshot() Operation {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.v
}

// report records progress (a running operation's only).
func (o *operation) report(p wire.OperationProgress) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.v.State == wire.OpRunning {
		o.v.Progress, o.v.UpdatedAt = p, time.Now()
	}
}

// finish records the outcome once: a later outcome (the work returning
// after shutdown failed the operation) is dropped.
func (o *operation) finish(res *wire.OperationResult, err error) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.v.State != wire.OpRunning {
		return false
	}
	o.v.UpdatedAt = time.Now()
	if err != nil {
		o.v.State, o.v.Err = wire.OpFailed, err
	} else {
		o.v.State, o.v.Result = wire.OpSucceeded, res
		o.v.Progress.Phase = "done"
	}
	return true
}

// operations are the daemon's asynchronous operations.
type operations struct {
	mu     sync.Mutex
	byID   map[string]*operation
	closed bool
	wg     sync.WaitGroup
	now    func() time.Time
}

func newOperations() *operations {
	return &operations{byID: map[string]*operation{}, now: time.Now}
}

type requestIDKey struct{}

// WithRequestID names, in ctx, the request that starts an operation (its
// id is kept with the operation and named in its error).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// start runs work in the background as an operation. The work keeps ctx's
// values (the caller) but not its cancellation: it runs on after the
// request that started it is gone, until it ends or the daemon shuts down.
func (s *Service) startOperation(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (*Operation, error) {
	ops := s.ops
	now := ops.now()
	rid, _ := ctx.Value(requestIDKey{}).(string)
	o := &operation{done: make(chan struct{}), v: Operation{RequestID: rid, Operation: wire.Operation{
		ID: newID("op-"), Kind: kind, Target: target, State: wire.OpRunning,
		Progress: wire.OperationProgress{Phase: "starting"}, CreatedAt: now, UpdatedAt: now}}}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel = cancel
	ops.mu.Lock()
	if ops.closed {
		ops.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("%w: daemon is shutting down", ErrConflict)
	}
	ops.pruneLocked(now)
	ops.byID[o.v.ID] = o
	ops.wg.Add(1)
	ops.mu.Unlock()
	log := s.log.With("operation", o.v.ID, "kind", kind, "target", target)
	log.Info("operation started", "request_id", rid)
	go func() {
		defer ops.wg.Done()
		defer close(o.done)
		defer cancel()
		res, err := work(WithProgress(wctx, o.report))
		if o.finish(res, o.canceledErr(err)) {
			if err != nil {
				log.Warn("operation failed", "err", err)
			} else {
				log.Info("operation succeeded")
			}
		}
	}()
	v := o.snapshot()
	return &v, nil
}

// pruneLocked forgets finished operations older than OperationTTL and all
// but the newest MaxFinishedOperations finished ones.
func (ops *operations) pruneLocked(now time.Time) {
	type ended struct {
		id string
		at time.Time
	}
	var finished []ended
	for id, o := range ops.byID {
		v := o.snapshot()
		if v.State == wire.OpRunning {
			continue
		}
		if now.Sub(v.UpdatedAt) > OperationTTL {
			delete(ops.byID, id)
			continue
		}
		finished = append(finished, ended{id, v.UpdatedAt})
	}
	if len(finished) <= MaxFinishedOperations {
		return
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].at.After(finished[j].at) })
	for _, e := range finished[MaxFinishedOperations:] {
		delete(ops.byID, e.id)
	}
}

// shutdown fails every running operation and cancels its work; no
// operation starts after it.
func (ops *operations) shutdown() {
	ops.mu.Lock()
	ops.closed = true
	running := make([]*operation, 0, len(ops.byID))
	for _, o := range ops.byID {
		running = append(running, o)
	}
	ops.mu.Unlock()
	for _, o := range running {
		o.finish(nil, fmt.Errorf("%w: the daemon shut down while the operation ran", ErrConflict))
		o.cancel()
	}
}

// Operation returns an operation by id.
func (s *Service) Operation(_ context.Context, id string) (*Operation, error) {
	if err := validID("operation", id); err != nil {
		return nil, err
	}
	s.ops.mu.Lock()
	s.ops.pruneLocked(s.ops.now())
	o, ok := s.ops.byID[id]
	s.ops.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: operation %s (finished operations are kept for %s, and none survives a daemon restart)", ErrNotFound, id, OperationTTL)
	}
	v := o.snapshot()
	return &v, nil
}

// ListOperations returns the operations the daemon keeps, oldest first.
func (s *Service) ListOperations(context.Context) ([]*Operation, error) {
	s.ops.mu.Lock()
	s.ops.pruneLocked(s.ops.now())
	out := make([]*Operation, 0, len(s.ops.byID))
	for _, o := range s.ops.byID {
		v := o.snapshot()
		out = append(out, &v)
	}
	s.ops.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// DeleteOperation forgets a finished operation; a running one is a
// conflict (its work cannot be taken back).
func (s *Service) DeleteOperation(ctx context.Context, id string) error {
	v, err := s.Operation(ctx, id)
	if err != nil {
		return err
	}
	if v.State == wire.OpRunning {
		return fmt.Errorf("%w: operation %s is still running", ErrConflict, id)
	}
	s.ops.mu.Lock()
	delete(s.ops.byID, id)
	s.ops.mu.Unlock()
	return nil
}

// WaitOperation blocks until the operation has finished or ctx ends.
func (s *Service) WaitOperation(ctx context.Context, id string) (*Operation, error) {
	if _, err := s.Operation(ctx, id); err != nil {
		return nil, err
	}
	s.ops.mu.Lock()
	o, ok := s.ops.byID[id]
	s.ops.mu.Unlock()
	if !ok {
		return s.Operation(ctx, id)
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v := o.snapshot()
	return &v, nil
}

// Asynchronous starts of the long operations: each checks what it can at
// once (the target exists, the request is valid), then runs the same work
// as its synchronous form in the background.

// startCall starts an operation on target whose work is call(ctx, arg),
// the synchronous form; result makes its answer the operation's result.
func startCall[A, T any](s *Service, ctx context.Context, kind, target string, call func(context.Context, A) (T, error), arg A, result func(T) *wire.OperationResult) (*Operation, error) {
	return s.startOperation(ctx, kind, target, func(ctx context.Context) (*wire.OperationResult, error) {
		v, err := call(ctx, arg)
		if err != nil {
			return nil, err
		}
		return result(v), nil
	})
}

// StartBoot boots a function's VM as an operation (BootVM).
func (s *Service) StartBoot(ctx context.Context, function string) (*Operation, error) {
	ref, err := ParseRef(function)
	if err != nil {
		return nil, err
	}
	if _, _, err := s.versions.ConfigOf(ctx, ref, false); err != nil {
		return nil, err
	}
	return startCall(s, ctx, wire.OpBoot, function, s.BootVM, function, func(v *catalog.VM) *wire.OperationResult {
		return &wire.OperationResult{VM: VMBody(v, nil)}
	})
}

// StartPrepare prepares a function as an operation (Prepare).
func (s *Service) StartPrepare(ctx context.Context, req PrepareRequest) (*Operation, error) {
	if _, err := s.checkPrepare(ctx, &req); err != nil {
		return nil, err
	}
	return startCall(s, ctx, wire.OpPrepare, req.Function, s.Prepare, req, func(res *PrepareResult) *wire.OperationResult {
		return &wire.OperationResult{Prepare: res}
	})
}

// StartStore places a snapshot in the memory store as an operation
// (StoreSnapshot).
func (s *Service) StartStore(ctx context.Context, id string) (*Operation, error) {
	if _, err := s.GetSnapshot(ctx, id); err != nil {
		return nil, err
	}
	if s.store == nil {
		return nil, fmt.Errorf("%w: %v", ErrConflict, s.storeErr)
	}
	return startCall(s, ctx, wire.OpStore, id, s.StoreSnapshot, id, func(e *store.Entry) *wire.OperationResult {
		return &wire.OperationResult{Store: e}
	})
}

// StartCopy copies a snapshot as an operation (CopySnapshot).
func (s *Service) StartCopy(ctx context.Context, id string) (*Operation, error) {
	if _, err := s.GetSnapshot(ctx, id); err != nil {
		return nil, err
	}
	return startCall(s, ctx, wire.OpCopy, id, s.CopySnapshot, id, func(sn *catalog.Snapshot) *wire.OperationResult {
		return &wire.OperationResult{Snapshot: SnapshotBody(sn)}
	})
}

// Progress reporting: long operations say which phase they are in through
// the context; without a reporter (synchronous requests) nothing happens.

type progressKey struct{}

// ProgressFunc receives an operation's progress.
type ProgressFunc func(wire.OperationProgress)

// WithProgress makes the long operations run with ctx report to fn.
func WithProgress(ctx context.Context, fn ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// report tells ctx's reporter, if any, where the work is.
func report(ctx context.Context, p wire.OperationProgress) {
	if fn, ok := ctx.Value(progressKey{}).(ProgressFunc); ok {
		fn(p)
	}
}

// phase reports a phase without counts.
func phase(ctx context.Context, name string) { report(ctx, wire.OperationProgress{Phase: name}) }

// subProgress is ctx with its reporter's phases prefixed (a boot inside a
// prepare reports "boot: starting vmm"), and counts dropped.
func subProgress(ctx context.Context, prefix string) context.Context {
	fn, ok := ctx.Value(progressKey{}).(ProgressFunc)
	if !ok {
		return ctx
	}
	return WithProgress(ctx, func(p wire.OperationProgress) { fn(wire.OperationProgress{Phase: prefix + p.Phase}) })
}
