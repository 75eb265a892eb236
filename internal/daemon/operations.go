package daemon

import (
	"context"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/ops"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// The asynchronous operations (?wait=false) are package ops's registry;
// the daemon starts its long requests there and answers for them.

// Operation retention (package ops).
const (
	OperationTTL          = ops.OperationTTL
	MaxFinishedOperations = ops.MaxFinishedOperations
)

// Operation is an asynchronous operation as the daemon keeps it (package
// ops).
type Operation = ops.Operation

// WithRequestID names, in ctx, the request that starts or cancels an
// operation (its id is kept with the operation and named in its error).
func WithRequestID(ctx context.Context, id string) context.Context {
	return ops.WithRequestID(ctx, id)
}

// Operation returns an operation by id.
func (s *Service) Operation(_ context.Context, id string) (*Operation, error) { return s.ops.Get(id) }

// ListOperations returns the operations the daemon keeps, oldest first.
func (s *Service) ListOperations(context.Context) ([]*Operation, error) { return s.ops.List(), nil }

// DeleteOperation forgets a finished operation; a running one is a
// conflict (its work cannot be taken back).
func (s *Service) DeleteOperation(_ context.Context, id string) error { return s.ops.Delete(id) }

// WaitOperation blocks until the operation has finished or ctx ends.
func (s *Service) WaitOperation(ctx context.Context, id string) (*Operation, error) {
	return s.ops.WaitFor(ctx, id)
}

// CancelOperation cancels a running operation and returns it once its
// work has stopped (package ops); what the work made before it stopped is
// cleaned up as after any failure of that work.
func (s *Service) CancelOperation(ctx context.Context, id string) (*Operation, error) {
	return s.ops.Cancel(ctx, id)
}

// startOperation runs work in the background as an operation (ops.Start).
func (s *Service) startOperation(ctx context.Context, kind, target string, work ops.Work) (*Operation, error) {
	return s.ops.Start(ctx, kind, target, work)
}

// Asynchronous starts of the long operations: each checks what it can at
// once (the target exists, the request is valid), then runs the same work
// as its synchronous form in the background.

// startCall starts an operation on target whose work is call(ctx, arg),
// the synchronous form; result makes its answer the operation's result.
func startCall[A, T any](s *Service, ctx context.Context, kind, target string, call func(context.Context, A) (T, error), arg A, result func(T) *wire.OperationResult) (*Operation, error) {
	return s.ops.Start(ctx, kind, target, func(ctx context.Context) (*wire.OperationResult, error) {
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
	if err := s.snaps.NeedStore(); err != nil {
		return nil, err
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

// Progress reporting travels in the context (package progress).

// ProgressFunc receives an operation's progress.
type ProgressFunc = progress.Func

// WithProgress makes the long operations run with ctx report to fn.
func WithProgress(ctx context.Context, fn ProgressFunc) context.Context {
	return progress.With(ctx, fn)
}

// report tells ctx's reporter, if any, where the work is.
func report(ctx context.Context, p wire.OperationProgress) { progress.Report(ctx, p) }

// phase reports a phase without counts.
func phase(ctx context.Context, name string) { progress.Phase(ctx, name) }

// subProgress is ctx with its reporter's phases prefixed, counts dropped.
func subProgress(ctx context.Context, prefix string) context.Context {
	return progress.Sub(ctx, prefix)
}
