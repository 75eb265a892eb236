// Package ops is the daemon's registry of asynchronous operations: long
// requests started with ?wait=false run in the background as an operation
// that can be listed, read, waited for, canceled and forgotten. The
// registry knows nothing of what an operation does: the daemon hands it
// the work as a function. Operations live in memory only.
package ops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/progress"
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

// DefaultCancelWait bounds how long Cancel waits for the work to stop.
const DefaultCancelWait = 30 * time.Second

// Operation is an asynchronous operation as the daemon keeps it: the wire
// document without its error, which the API renders from Err (only the API
// maps errors to statuses).
type Operation struct {
	wire.Operation
	Err       error  // why it failed
	RequestID string // the request that started it
}

// Work is what an operation runs; its context carries the operation's
// progress reporter (package progress) and ends when the operation is canceled or the
// daemon shuts down.
type Work func(context.Context) (*wire.OperationResult, error)

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

// Registry holds the daemon's asynchronous operations.
type Registry struct {
	log *slog.Logger
	// cancelWait bounds how long Cancel waits for the work to stop.
	cancelWait time.Duration

	mu     sync.Mutex
	byID   map[string]*operation
	closed bool
	wg     sync.WaitGroup
	now    func() time.Time
}

// New makes an empty registry that logs operations' starts and ends to log.
func New(log *slog.Logger) *Registry {
	return &Registry{log: log, cancelWait: DefaultCancelWait, byID: map[string]*operation{}, now: time.Now}
}

type requestIDKey struct{}

// WithRequestID names, in ctx, the request that starts or cancels an
// operation (its id is kept with the operation and named in its error).
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// requestID is the request ctx names ("": none).
func requestID(ctx context.Context) string {
	rid, _ := ctx.Value(requestIDKey{}).(string)
	return rid
}

var opIDRE = regexp.MustCompile(`^op-[0-9a-f]{12}$`)

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "op-" + hex.EncodeToString(b[:])
}

// Start runs work in the background as an operation of kind on target.
// The work keeps ctx's values (the caller) but not its cancellation: it
// runs on after the request that started it is gone, until it ends, it is
// canceled or the registry shuts down.
func (r *Registry) Start(ctx context.Context, kind, target string, work Work) (*Operation, error) {
	now := r.now()
	rid := requestID(ctx)
	o := &operation{done: make(chan struct{}), v: Operation{RequestID: rid, Operation: wire.Operation{
		ID: newID(), Kind: kind, Target: target, State: wire.OpRunning,
		Progress: wire.OperationProgress{Phase: "starting"}, CreatedAt: now, UpdatedAt: now}}}
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	o.cancel = cancel
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("%w: daemon is shutting down", errdefs.ErrConflict)
	}
	r.pruneLocked(now)
	r.byID[o.v.ID] = o
	r.wg.Add(1)
	r.mu.Unlock()
	log := r.log.With("operation", o.v.ID, "kind", kind, "target", target)
	log.Info("operation started", "request_id", rid)
	go func() {
		defer r.wg.Done()
		defer close(o.done)
		defer cancel()
		res, err := work(progress.With(wctx, o.report))
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
func (r *Registry) pruneLocked(now time.Time) {
	type ended struct {
		id string
		at time.Time
	}
	var finished []ended
	for id, o := range r.byID {
		v := o.snapshot()
		if v.State == wire.OpRunning {
			continue
		}
		if now.Sub(v.UpdatedAt) > OperationTTL {
			delete(r.byID, id)
			continue
		}
		finished = append(finished, ended{id, v.UpdatedAt})
	}
	if len(finished) <= MaxFinishedOperations {
		return
	}
	sort.Slice(finished, func(i, j int) bool { return finished[i].at.After(finished[j].at) })
	for _, e := range finished[MaxFinishedOperations:] {
		delete(r.byID, e.id)
	}
}

// Shutdown fails every running operation and cancels its work; no
// operation starts after it. Wait waits for the work to return.
func (r *Registry) Shutdown() {
	r.mu.Lock()
	r.closed = true
	running := make([]*operation, 0, len(r.byID))
	for _, o := range r.byID {
		running = append(running, o)
	}
	r.mu.Unlock()
	for _, o := range running {
		o.finish(nil, fmt.Errorf("%w: the daemon shut down while the operation ran", errdefs.ErrConflict))
		o.cancel()
	}
}

// Wait blocks until the work of every operation started has returned.
func (r *Registry) Wait() { r.wg.Wait() }

// lookup is operation id, after the expired ones are pruned.
func (r *Registry) lookup(id string) (*operation, error) {
	if !opIDRE.MatchString(id) {
		return nil, fmt.Errorf("%w: operation id %q is malformed", errdefs.ErrInvalid, id)
	}
	r.mu.Lock()
	r.pruneLocked(r.now())
	o, ok := r.byID[id]
	r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%w: operation %s (finished operations are kept for %s, and none survives a daemon restart)", errdefs.ErrNotFound, id, OperationTTL)
	}
	return o, nil
}

// Get returns an operation by id.
func (r *Registry) Get(id string) (*Operation, error) {
	o, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	v := o.snapshot()
	return &v, nil
}

// List returns the operations the registry keeps, oldest first.
func (r *Registry) List() []*Operation {
	r.mu.Lock()
	r.pruneLocked(r.now())
	out := make([]*Operation, 0, len(r.byID))
	for _, o := range r.byID {
		v := o.snapshot()
		out = append(out, &v)
	}
	r.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// Delete forgets a finished operation; a running one is a conflict (its
// work cannot be taken back).
func (r *Registry) Delete(id string) error {
	o, err := r.lookup(id)
	if err != nil {
		return err
	}
	if o.snapshot().State == wire.OpRunning {
		return fmt.Errorf("%w: operation %s is still running", errdefs.ErrConflict, id)
	}
	r.mu.Lock()
	delete(r.byID, id)
	r.mu.Unlock()
	return nil
}

// WaitFor blocks until operation id has finished or ctx ends.
func (r *Registry) WaitFor(ctx context.Context, id string) (*Operation, error) {
	o, err := r.lookup(id)
	if err != nil {
		return nil, err
	}
	select {
	case <-o.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	v := o.snapshot()
	return &v, nil
}
