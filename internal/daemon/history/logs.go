package history

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Function logs: what an invocation wrote to stdout and stderr, and the
// guest kernel's messages, come back with the guest's reply (package
// agent) and are kept with the invocation history (catalog
// invocation_logs), pruned with it and under a byte budget. Every
// invocation that completes keeps them, however it was started.

// Bounds of the logs.
const (
	// DefaultHistoryMaxLogBytes bounds the logs the history keeps in all.
	DefaultHistoryMaxLogBytes = 1 << 30
	// DefaultLogPage and MaxLogPage are the lines of a page of logs;
	// maxLogPageBytes bounds its text.
	DefaultLogPage  = 1000
	MaxLogPage      = 10000
	maxLogPageBytes = 4 << 20
	// MaxLogWait is the longest a request for logs may wait for new ones.
	MaxLogWait = time.Minute
)

// LogsMissingAgent is what an invocation's logs say when its guest's
// agent sent none.
const LogsMissingAgent = "the guest agent predates output capture: take a new snapshot with the current guest image"

var invocationIDRE = regexp.MustCompile(`^inv-[0-9a-f]{12}$`)

// logFeed wakes the requests that wait for new logs.
type logFeed struct {
	mu sync.Mutex
	ch chan struct{} // closed when logs are recorded
	// added is how many bytes of logs were kept since the last prune.
	added atomic.Int64
}

// changed is closed once logs are recorded after the call.
func (f *logFeed) changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch == nil {
		f.ch = make(chan struct{})
	}
	return f.ch
}

func (f *logFeed) notify() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ch != nil {
		close(f.ch)
		f.ch = nil
	}
}

// InvocationLogs are a reply's logs as the invocation answers them, with
// the trace of the request in ctx (when its span is sampled).
func InvocationLogs(ctx context.Context, r *agent.Reply) *wire.InvocationLogs {
	l := &wire.InvocationLogs{}
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		l.TraceID = sc.TraceID().String()
	}
	if r.Logs == nil {
		l.Missing = LogsMissingAgent
		return l
	}
	l.Output, l.OutputBytes, l.CutBytes, l.Kernel, l.Missing = r.Logs.Output, r.Logs.Bytes, r.Logs.Cut, r.Logs.Kernel, r.Logs.Error
	return l
}

// keepLogs records inv's logs with its record (made at at), unless there
// are none to show.
func (h *History) keepLogs(ctx context.Context, inv *wire.Invocation, at time.Time) {
	l := inv.Logs
	if l == nil || l.Output == "" && l.Kernel == "" {
		return
	}
	row := &catalog.InvocationLogs{Invocation: inv.ID, Function: inv.Function, TraceID: l.TraceID, Output: l.Output,
		OutputBytes: l.OutputBytes, CutBytes: l.CutBytes, Kernel: l.Kernel, CreatedAt: at}
	if err := h.d.DB.PutInvocationLogs(context.WithoutCancel(ctx), row); err != nil {
		h.d.Log.Error("record invocation logs", "invocation", inv.ID, "err", err)
		return
	}
	h.logs.notify()
	// The byte budget is applied with the history's prunes, and sooner
	// when logs come fast.
	if budget := h.cfg.HistoryMaxLogBytes; budget > 0 && h.logs.added.Add(int64(len(l.Output)+len(l.Kernel))) > budget/16 {
		h.pruneLogs(context.WithoutCancel(ctx))
	}
}

// pruneLogs drops the logs whose invocation records are gone and the
// oldest beyond the byte budget.
func (h *History) pruneLogs(ctx context.Context) {
	h.logs.added.Store(0)
	n, err := h.d.DB.PruneInvocationLogs(ctx, max(h.cfg.HistoryMaxLogBytes, 0))
	if err != nil {
		h.d.Log.Error("prune invocation logs", "err", err)
	} else if n > 0 {
		h.d.Log.Info("invocation logs pruned", "invocations", n)
	}
}

// LogPosition is a place in a function's logs: the line Line of the
// logs recorded as Seq, or the first of later ones if it has fewer lines.
type LogPosition struct {
	Seq  int64
	Line int
}

// LogsRequest asks for a function's log lines, oldest first.
type LogsRequest struct {
	Function   string
	Invocation string    // only this invocation's, if set
	Since      time.Time // only of invocations recorded at or after it, if set
	After      LogPosition
	Limit      int           // lines (0: DefaultLogPage; at most MaxLogPage)
	Wait       time.Duration // with no line to give, wait up to this long for some (at most MaxLogWait)
}

// LogsPage is a page of log lines; Next is where the next page starts.
type LogsPage struct {
	Lines []wire.LogLine
	Next  LogPosition
	More  bool // lines after Next are there already
}

// FunctionLogs returns a function's log lines after req.After; with Wait
// and none there yet, it waits for new ones until Wait passes, ctx ends or
// the daemon stops, and then answers what there is (maybe nothing).
func (h *History) FunctionLogs(ctx context.Context, req LogsRequest) (*LogsPage, error) {
	page, err := h.functionLogs(ctx, req)
	if err != nil && ctx.Err() != nil {
		return &LogsPage{}, nil // a follower that went away mid-read: nobody reads an error
	}
	return page, err
}

func (h *History) functionLogs(ctx context.Context, req LogsRequest) (*LogsPage, error) {
	if err := h.checkLogsRequest(ctx, &req); err != nil {
		return nil, err
	}
	deadline := time.Now().Add(req.Wait)
	for {
		changed := h.logs.changed()
		page, err := h.readLogs(ctx, req)
		if err != nil || len(page.Lines) > 0 || req.Invocation != "" {
			return page, err
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return page, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-changed:
		case <-t.C:
		case <-h.d.Stop:
		case <-ctx.Done():
		}
		t.Stop()
		if ctx.Err() != nil || isClosed(h.d.Stop) {
			return page, nil // a follower that went away: nobody reads an error
		}
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// checkLogsRequest refuses what cannot be answered: a bad name, an
// unknown function (one deleted keeps its history), an invocation of
// another function or not in the history, bounds out of range.
func (h *History) checkLogsRequest(ctx context.Context, req *LogsRequest) error {
	if err := h.d.ValidName(req.Function); err != nil {
		return err
	}
	switch {
	case req.Limit < 0 || req.Limit > MaxLogPage:
		return fmt.Errorf("%w: limit %d: want 1 to %d lines", errdefs.ErrInvalid, req.Limit, MaxLogPage)
	case req.Limit == 0:
		req.Limit = DefaultLogPage
	}
	if req.Wait < 0 || req.Wait > MaxLogWait {
		return fmt.Errorf("%w: wait %s: want 0 to %s", errdefs.ErrInvalid, req.Wait, MaxLogWait)
	}
	if req.After.Seq < 0 || req.After.Line < 0 {
		return fmt.Errorf("%w: a log position is never negative", errdefs.ErrInvalid)
	}
	if req.Invocation != "" {
		return h.checkInvocation(ctx, req.Function, req.Invocation)
	}
	if _, err := h.d.DB.GetFunction(ctx, req.Function); errors.Is(err, catalog.ErrNotFound) {
		if rows, err := h.d.DB.ListInvocationLogs(ctx, catalog.LogsQuery{Function: req.Function, Limit: 1}); err != nil || len(rows) == 0 {
			return fmt.Errorf("%w: function %q (and no logs of one by that name)", errdefs.ErrNotFound, req.Function)
		}
	} else if err != nil {
		return err
	}
	return nil
}

// checkInvocation refuses an invocation id that is malformed, not in the
// history or of another function than function.
func (h *History) checkInvocation(ctx context.Context, function, id string) error {
	if !invocationIDRE.MatchString(id) {
		return fmt.Errorf("%w: invocation id %q is malformed", errdefs.ErrInvalid, id)
	}
	fn, err := h.d.DB.InvocationFunction(ctx, id)
	if errors.Is(err, catalog.ErrNotFound) {
		return fmt.Errorf("%w: invocation %s is not in the history (never recorded, or pruned)", errdefs.ErrNotFound, id)
	}
	if err != nil {
		return err
	}
	if fn != function {
		return fmt.Errorf("%w: invocation %s is of function %q, not %q", errdefs.ErrInvalid, id, fn, function)
	}
	return nil
}

// readLogs reads the page of lines after req.After.
func (h *History) readLogs(ctx context.Context, req LogsRequest) (*LogsPage, error) {
	const batch = 16 // logs read at a time (each at most a few MiB of text)
	page := &LogsPage{Next: req.After}
	size := 0
	for {
		rows, err := h.d.DB.ListInvocationLogs(ctx, catalog.LogsQuery{Function: req.Function, Invocation: req.Invocation,
			Since: req.Since, FromSeq: page.Next.Seq, Limit: batch})
		if err != nil {
			return nil, fmt.Errorf("read logs of %s: %w", req.Function, err)
		}
		for _, r := range rows {
			lines := logLines(r)
			from := 0
			if r.Seq == page.Next.Seq {
				from = page.Next.Line
			}
			for i := from; i < len(lines); i++ {
				if len(page.Lines) == req.Limit || size+len(lines[i].Text) > maxLogPageBytes && len(page.Lines) > 0 {
					page.Next, page.More = LogPosition{r.Seq, i}, true
					return page, nil
				}
				page.Lines = append(page.Lines, lines[i])
				size += len(lines[i].Text)
			}
			page.Next = LogPosition{r.Seq + 1, 0}
		}
		if len(rows) < batch {
			return page, nil
		}
	}
}

// logLines are the lines of one invocation's logs: its output's, then its
// kernel messages'.
func logLines(r *catalog.InvocationLogs) []wire.LogLine {
	var out []wire.LogLine
	for _, part := range []struct{ stream, text string }{{wire.StreamOutput, r.Output}, {wire.StreamKernel, r.Kernel}} {
		if part.text == "" {
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(part.text, "\n"), "\n") {
			out = append(out, wire.LogLine{Time: r.CreatedAt, Function: r.Function, Invocation: r.Invocation,
				TraceID: r.TraceID, Stream: part.stream, Text: line})
		}
	}
	return out
}
