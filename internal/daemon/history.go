package daemon

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
)

// The invocation history and its logs are package history's; the daemon
// records its invocations there and forwards the API's reads.

// newHistory makes the history over the daemon's catalog and settings.
func (s *Service) newHistory() *history.History {
	return history.New(history.Config{DataDir: s.cfg.DataDir, MaxStoredResultBytes: s.cfg.MaxStoredResultBytes,
		HistoryMax: s.cfg.HistoryMax, HistoryMaxAge: s.cfg.HistoryMaxAge, HistoryMaxLogBytes: s.cfg.HistoryMaxLogBytes},
		history.Deps{DB: s.db, Log: s.log, Stop: s.stop, ValidName: ValidName})
}

// resultsDir holds the spill files of results being read from guests.
func (s *Service) resultsDir() string { return history.ResultsDir(s.cfg.DataDir) }

// record keeps a completed invocation in the history (with why no ready
// clone served it, if one might have) and counts it in the metrics.
func (s *Service) record(ctx context.Context, inv *Invocation) {
	if n := invoke.ReadyNoteOf(ctx); n != nil && inv.Timing.Ready == nil {
		inv.Timing.Ready = n // no ready clone served it: why
	}
	s.history.Record(ctx, inv)
	s.metrics.Invocation(inv)
}

// ListInvocations returns recent invocations, newest first.
// Records created before the (before, beforeID) cursor only, if before is
// set.
func (s *Service) ListInvocations(ctx context.Context, function string, limit int, before time.Time, beforeID string) ([]*catalog.Invocation, error) {
	return s.history.ListInvocations(ctx, function, limit, before, beforeID)
}
