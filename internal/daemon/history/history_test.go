package history

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/catalog/catalogtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

var testNameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

func validName(name string) error {
	if !testNameRE.MatchString(name) {
		return fmt.Errorf("%w: function name %q", errdefs.ErrInvalid, name)
	}
	return nil
}

// newHistory is a history over a fresh catalog in a temporary directory,
// with cfg's bounds (its DataDir set), the catalog and the stop channel.
func newHistory(t *testing.T, cfg Config) (*History, *catalog.DB, chan struct{}) {
	t.Helper()
	cfg.DataDir = t.TempDir()
	if cfg.MaxStoredResultBytes == 0 {
		cfg.MaxStoredResultBytes = DefaultMaxStoredResult
	}
	db := catalogtest.Open(t, cfg.DataDir)
	stop := make(chan struct{})
	return New(cfg, Deps{DB: db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Stop: stop, ValidName: validName}), db, stop
}

var invSeq int

// invocation is a fresh invocation of function, ok, with output as its logs.
func invocation(function, output string) *wire.Invocation {
	invSeq++
	inv := &wire.Invocation{ID: fmt.Sprintf("inv-%012x", invSeq), Function: function, VM: "vm-000000000001", Mode: "warm", OK: true,
		Result: json.RawMessage(`{"n":1}`)}
	if output != "" {
		inv.Logs = &wire.InvocationLogs{Output: output, OutputBytes: int64(len(output))}
	}
	return inv
}

// A record keeps the invocation without its logs, which are kept apart;
// listing answers newest first, of one function if asked, and refuses a
// malformed name.
func TestRecordAndList(t *testing.T) {
	h, _, _ := newHistory(t, Config{})
	ctx := context.Background()
	a, b, c := invocation("echo", "one\n"), invocation("other", ""), invocation("echo", "")
	for _, inv := range []*wire.Invocation{a, b, c} {
		h.Record(ctx, inv)
		time.Sleep(2 * time.Millisecond) // distinct creation times
	}
	recs, err := h.ListInvocations(ctx, "echo", 0, time.Time{}, "")
	if err != nil || len(recs) != 2 || recs[0].ID != c.ID || recs[1].ID != a.ID {
		t.Fatalf("echo's records: %v %+v", err, recs)
	}
	var d wire.Invocation
	if err := json.Unmarshal(recs[1].Detail, &d); err != nil || d.ID != a.ID || d.Logs != nil || string(d.Result) != `{"n":1}` || !recs[1].OK {
		t.Errorf("detail %s: %v", recs[1].Detail, err)
	}
	if a.Logs == nil {
		t.Error("recording took the caller's logs")
	}
	if all, _ := h.ListInvocations(ctx, "", 2, time.Time{}, ""); len(all) != 2 || all[0].ID != c.ID {
		t.Errorf("the newest two: %+v", all)
	}
	if _, err := h.ListInvocations(ctx, "No/such", 10, time.Time{}, ""); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("a malformed name: %v", err)
	}
}

// Timeouts and VM failures are recorded as failed with their type and
// message; any other error is returned unrecorded.
func TestRecordFailure(t *testing.T) {
	h, _, _ := newHistory(t, Config{})
	ctx := context.Background()
	for _, c := range []struct {
		err  error
		typ  string
		kept bool
	}{
		{fmt.Errorf("%w: vm x: invocation timed out after 1s", errdefs.ErrTimeout), ErrorTypeTimeout, true},
		{fmt.Errorf("%w: vm x: vm process exited", errdefs.ErrVMFailed), ErrorTypeVMFailed, true},
		{fmt.Errorf("%w: registry down", errdefs.ErrRegistryUnavailable), "", false},
		{context.Canceled, "", false},
	} {
		inv := invocation("echo", "")
		start := time.Now().Add(-50 * time.Millisecond)
		if err := h.RecordFailure(ctx, inv, start, c.err); err != c.err {
			t.Errorf("%v: returned %v", c.err, err)
		}
		recs, _ := h.ListInvocations(ctx, "echo", 1000, time.Time{}, "")
		found := false
		for _, r := range recs {
			if r.ID != inv.ID {
				continue
			}
			found = true
			var d wire.Invocation
			_ = json.Unmarshal(r.Detail, &d)
			if r.OK || d.OK || d.Result != nil || d.Error == nil || d.Error.Type != c.typ || d.Error.Message != c.err.Error() || d.Timing.TotalMS < 50 {
				t.Errorf("%v: record %+v detail %s", c.err, r, r.Detail)
			}
		}
		if found != c.kept {
			t.Errorf("%v: recorded %v, want %v", c.err, found, c.kept)
		}
	}
}

// Every PruneEvery records the history applies HistoryMax, and the logs
// of the records dropped go with them.
func TestPrunedEveryFewRecords(t *testing.T) {
	h, db, _ := newHistory(t, Config{HistoryMax: 3})
	ctx := context.Background()
	for i := range PruneEvery - 1 {
		h.Record(ctx, invocation("echo", fmt.Sprintf("line %d\n", i)))
	}
	if recs, _ := h.ListInvocations(ctx, "echo", 1000, time.Time{}, ""); len(recs) != PruneEvery-1 {
		t.Fatalf("%d records before the prune, want %d", len(recs), PruneEvery-1)
	}
	h.Record(ctx, invocation("echo", "last\n"))
	if recs, _ := h.ListInvocations(ctx, "echo", 1000, time.Time{}, ""); len(recs) != 3 {
		t.Fatalf("%d records after %d, want 3", len(recs), PruneEvery)
	}
	rows, err := db.ListInvocationLogs(ctx, catalog.LogsQuery{Function: "echo", Limit: 1000})
	if err != nil || len(rows) != 3 || rows[2].Output != "last\n" {
		t.Errorf("logs left: %v, %d rows", err, len(rows))
	}
}

// Records older than HistoryMaxAge go at a prune.
func TestPrunedByAge(t *testing.T) {
	h, db, _ := newHistory(t, Config{HistoryMaxAge: time.Hour})
	ctx := context.Background()
	old := &catalog.Invocation{ID: "inv-0000000000aa", Function: "echo", OK: true, Detail: []byte(`{}`), CreatedAt: time.Now().Add(-2 * time.Hour)}
	if err := db.PutInvocation(ctx, old); err != nil {
		t.Fatal(err)
	}
	fresh := invocation("echo", "")
	h.Record(ctx, fresh)
	h.Prune(ctx)
	if recs, _ := h.ListInvocations(ctx, "echo", 10, time.Time{}, ""); len(recs) != 1 || recs[0].ID != fresh.ID {
		t.Errorf("left %+v", recs)
	}
}
