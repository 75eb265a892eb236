// Package history is the daemon's invocation history: a bounded record of
// every invocation that reached a guest (failed ones too), the logs each
// wrote, kept apart and under a byte budget, the requests that read and
// follow those logs, and the spill directory of results being read from
// guests. The records live in the catalog; what the history needs of the
// rest of the daemon comes in its Deps.
package history

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Config bounds the history (the daemon's settings of the same names).
type Config struct {
	DataDir              string        // results/ under it holds the result spill files
	MaxStoredResultBytes int           // result bytes a record keeps
	HistoryMax           int           // records kept (negative: no bound)
	HistoryMaxAge        time.Duration // no record older (0 or negative: no bound)
	HistoryMaxLogBytes   int64         // bytes of logs kept in all (0 or negative: no bound)
}

// DB is the part of the catalog the history uses.
type DB interface {
	PutInvocation(ctx context.Context, inv *catalog.Invocation) error
	PruneInvocations(ctx context.Context, keep int, before time.Time) (int64, error)
	ListInvocations(ctx context.Context, function string, limit int, before time.Time, beforeID string) ([]*catalog.Invocation, error)
	PutInvocationLogs(ctx context.Context, l *catalog.InvocationLogs) error
	ListInvocationLogs(ctx context.Context, q catalog.LogsQuery) ([]*catalog.InvocationLogs, error)
	InvocationFunction(ctx context.Context, id string) (string, error)
	PruneInvocationLogs(ctx context.Context, maxBytes int64) (int64, error)
	GetFunction(ctx context.Context, name string) (*catalog.Function, error)
}

// Deps is what the history needs of the rest of the daemon.
type Deps struct {
	DB  DB
	Log *slog.Logger
	// Stop is closed when the daemon stops: requests waiting for logs end.
	Stop <-chan struct{}
	// ValidName checks a function name (ErrInvalid if it is not one).
	ValidName func(string) error
}

// History records invocations and serves their records and logs.
type History struct {
	cfg Config
	d   Deps
	// recorded counts the records made since start (pruning).
	recorded atomic.Int64
	logs     logFeed
}

// New makes the history over deps with the bounds of cfg.
func New(cfg Config, deps Deps) *History { return &History{cfg: cfg, d: deps} }

// PruneEvery is how many records go between two prunes of the history.
const PruneEvery = 64

// Error types of the invocations recorded after a platform failure (a
// handler's own exceptions carry their Python type).
const (
	ErrorTypeTimeout  = "Timeout"
	ErrorTypeVMFailed = "VMFailed"
)

// Record keeps inv (a copy bounded by the config) and its logs.
func (h *History) Record(ctx context.Context, inv *wire.Invocation) {
	rec := &catalog.Invocation{ID: inv.ID, Function: inv.Function, VM: inv.VM, Snapshot: inv.Snapshot,
		Strategy: inv.Strategy, OK: inv.OK, Detail: h.detail(inv), CreatedAt: time.Now()}
	if err := h.d.DB.PutInvocation(context.WithoutCancel(ctx), rec); err != nil {
		h.d.Log.Error("record invocation", "invocation", inv.ID, "err", err)
	} else {
		h.keepLogs(ctx, inv, rec.CreatedAt)
	}
	h.counted(ctx)
}

// RecordFailure records inv, which failed with err after it was sent to a
// guest that started at start, and returns err. Only the guest's failures
// are invocations the guest did not complete: a timeout (ErrTimeout) or a
// VM that failed (ErrVMFailed) is recorded with ok false and an error
// saying what happened; any other error (the registry, the caller going
// away) is returned unrecorded.
func (h *History) RecordFailure(ctx context.Context, inv *wire.Invocation, start time.Time, err error) error {
	typ := ""
	switch {
	case errors.Is(err, errdefs.ErrTimeout):
		typ = ErrorTypeTimeout
	case errors.Is(err, errdefs.ErrVMFailed):
		typ = ErrorTypeVMFailed
	default:
		return err
	}
	inv.OK, inv.Result = false, nil
	inv.Error = &wire.FunctionError{Type: typ, Message: err.Error()}
	inv.Timing.TotalMS = float64(time.Since(start).Microseconds()) / 1000
	rec := &catalog.Invocation{ID: inv.ID, Function: inv.Function, VM: inv.VM, Snapshot: inv.Snapshot,
		Strategy: inv.Strategy, OK: false, Detail: h.detail(inv), CreatedAt: time.Now()}
	if perr := h.d.DB.PutInvocation(context.WithoutCancel(ctx), rec); perr != nil {
		h.d.Log.Error("record failed invocation", "invocation", inv.ID, "err", perr)
	}
	h.counted(ctx)
	return err
}

// counted counts a record, and prunes every PruneEvery records.
func (h *History) counted(ctx context.Context) {
	if h.recorded.Add(1)%PruneEvery == 0 {
		h.Prune(context.WithoutCancel(ctx))
	}
}

// Prune applies the history's bounds (HistoryMax, HistoryMaxAge), then
// the logs' (HistoryMaxLogBytes).
func (h *History) Prune(ctx context.Context) {
	var before time.Time
	if h.cfg.HistoryMaxAge > 0 {
		before = time.Now().Add(-h.cfg.HistoryMaxAge)
	}
	n, err := h.d.DB.PruneInvocations(ctx, max(h.cfg.HistoryMax, 0), before)
	if err != nil {
		h.d.Log.Error("prune invocation history", "err", err)
	} else if n > 0 {
		h.d.Log.Info("invocation history pruned", "records", n)
	}
	h.pruneLogs(ctx)
}

// ListInvocations returns recent invocations, newest first (of function
// only, if set; limit out of 1 to 1001: 100). Records created before the
// (before, beforeID) cursor only, if before is set.
func (h *History) ListInvocations(ctx context.Context, function string, limit int, before time.Time, beforeID string) ([]*catalog.Invocation, error) {
	if function != "" {
		if err := h.d.ValidName(function); err != nil {
			return nil, err
		}
	}
	if limit <= 0 || limit > 1001 {
		limit = 100
	}
	return h.d.DB.ListInvocations(ctx, function, limit, before, beforeID)
}
