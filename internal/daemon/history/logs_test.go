package history

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/wire"
)

func texts(lines []wire.LogLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Stream+":"+l.Text)
	}
	return out
}

// A reply's logs become the invocation's, with the sampled trace of the
// request; a reply without logs says the agent predates them.
func TestInvocationLogs(t *testing.T) {
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4}, TraceFlags: trace.FlagsSampled})
	ctx := trace.ContextWithSpanContext(context.Background(), sc)
	l := InvocationLogs(ctx, &agent.Reply{Logs: &agent.Logs{Output: "out\n", Bytes: 9, Cut: 5, Kernel: "k\n", Error: "partial"}})
	if l.Output != "out\n" || l.OutputBytes != 9 || l.CutBytes != 5 || l.Kernel != "k\n" || l.Missing != "partial" || l.TraceID != sc.TraceID().String() {
		t.Errorf("logs %+v", l)
	}
	if l := InvocationLogs(context.Background(), &agent.Reply{}); l.Missing != LogsMissingAgent || l.TraceID != "" || l.Output != "" {
		t.Errorf("an old agent's logs %+v", l)
	}
}

// Lines come oldest first, output then kernel messages, each naming its
// invocation; an invocation that wrote nothing keeps none; pages end at
// their limit wherever that is in an invocation's lines.
func TestLogsReadInPages(t *testing.T) {
	h, _, _ := newHistory(t, Config{})
	ctx := context.Background()
	first := invocation("echo", "one\n\ntwo")
	first.Logs.Kernel = "[    5.000000] oom\n"
	h.Record(ctx, first)
	h.Record(ctx, invocation("echo", ""))
	second := invocation("echo", "three\n")
	h.Record(ctx, second)
	page, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output:one", "output:", "output:two", "kernel:[    5.000000] oom", "output:three"}
	if got := texts(page.Lines); strings.Join(got, "|") != strings.Join(want, "|") || page.More {
		t.Fatalf("lines %q, want %q (more %v)", got, want, page.More)
	}
	if page.Lines[0].Invocation != first.ID || page.Lines[4].Invocation != second.ID || page.Lines[0].Function != "echo" {
		t.Errorf("lines name %+v", page.Lines)
	}
	var paged []string
	pos := LogPosition{}
	for range 10 {
		p, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo", After: pos, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		if p.More && len(p.Lines) != 2 {
			t.Fatalf("a page with more after it has %d lines", len(p.Lines))
		}
		paged, pos = append(paged, texts(p.Lines)...), p.Next
		if !p.More {
			break
		}
	}
	if strings.Join(paged, "|") != strings.Join(want, "|") || pos != page.Next {
		t.Errorf("paged %q ending at %+v, want %q ending at %+v", paged, pos, want, page.Next)
	}
	one, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo", Invocation: second.ID})
	if err != nil || len(one.Lines) != 1 || one.Lines[0].Text != "three" {
		t.Errorf("one invocation's: %v %+v", err, one)
	}
	if later, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo", Since: time.Now().Add(time.Minute)}); err != nil || len(later.Lines) != 0 {
		t.Errorf("since later: %v %+v", err, later)
	}
}

// A request with nothing to give waits for the next logs and answers them
// at once; it ends, empty and without error, when its wait passes, its
// caller goes away or the daemon stops.
func TestLogsFollowed(t *testing.T) {
	h, _, stop := newHistory(t, Config{})
	ctx := context.Background()
	h.Record(ctx, invocation("echo", "before\n"))
	start, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil || len(start.Lines) != 1 {
		t.Fatalf("%v %+v", err, start)
	}
	follow := func(ctx context.Context, wait time.Duration) chan *LogsPage {
		got := make(chan *LogsPage, 1)
		go func() {
			p, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo", After: start.Next, Wait: wait})
			if err != nil {
				t.Error(err)
			}
			got <- p
		}()
		time.Sleep(50 * time.Millisecond) // the follower waits by now
		return got
	}
	answer := func(got chan *LogsPage, what string) *LogsPage {
		t.Helper()
		return polltest.Receive(t, got, 10*time.Second, "the waiting request's answer: "+what)
	}
	got := follow(ctx, 30*time.Second)
	h.Record(ctx, invocation("echo", "")) // wakes it; it waits on
	h.Record(ctx, invocation("echo", "news\n"))
	if p := answer(got, "new logs"); len(p.Lines) != 1 || p.Lines[0].Text != "news" {
		t.Fatalf("followed %+v", p)
	}
	start.Next.Seq += 1 << 40 // nothing will come after this
	t0 := time.Now()
	if p := answer(follow(ctx, 100*time.Millisecond), "a wait that passed"); len(p.Lines) != 0 || time.Since(t0) < 100*time.Millisecond {
		t.Errorf("a wait that passed: %+v after %s", p, time.Since(t0))
	}
	cctx, cancel := context.WithCancel(ctx)
	got = follow(cctx, 30*time.Second)
	cancel()
	if p := answer(got, "a caller gone"); len(p.Lines) != 0 {
		t.Errorf("a canceled wait: %+v", p)
	}
	got = follow(ctx, 30*time.Second)
	close(stop)
	if p := answer(got, "the daemon stopping"); len(p.Lines) != 0 {
		t.Errorf("a wait as the daemon stops: %+v", p)
	}
}

// What cannot be answered is refused with what is wrong; a function the
// catalog no longer has keeps its logs readable.
func TestLogsRequestsRefused(t *testing.T) {
	h, db, _ := newHistory(t, Config{})
	ctx := context.Background()
	if err := db.PutFunction(ctx, &catalog.Function{Name: "other", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	kept := invocation("echo", "kept\n") // echo is not in the catalog: deleted
	h.Record(ctx, kept)
	for _, c := range []struct {
		req  LogsRequest
		kind error
		says string
	}{
		{LogsRequest{Function: "no/such"}, errdefs.ErrInvalid, "name"},
		{LogsRequest{Function: "ghost"}, errdefs.ErrNotFound, `function "ghost"`},
		{LogsRequest{Function: "other", Invocation: kept.ID}, errdefs.ErrInvalid, `is of function "echo", not "other"`},
		{LogsRequest{Function: "echo", Invocation: "inv-000000000fff"}, errdefs.ErrNotFound, "not in the history"},
		{LogsRequest{Function: "echo", Invocation: "inv-x"}, errdefs.ErrInvalid, "malformed"},
		{LogsRequest{Function: "echo", Limit: MaxLogPage + 1}, errdefs.ErrInvalid, "limit"},
		{LogsRequest{Function: "echo", Limit: -1}, errdefs.ErrInvalid, "limit"},
		{LogsRequest{Function: "echo", Wait: 2 * MaxLogWait}, errdefs.ErrInvalid, "wait"},
		{LogsRequest{Function: "echo", After: LogPosition{Line: -1}}, errdefs.ErrInvalid, "negative"},
	} {
		_, err := h.FunctionLogs(ctx, c.req)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want %v saying %q", c.req, err, c.kind, c.says)
		}
	}
	if p, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo"}); err != nil || len(p.Lines) != 1 {
		t.Errorf("a deleted function's logs: %v %+v", err, p)
	}
	if p, err := h.FunctionLogs(ctx, LogsRequest{Function: "other"}); err != nil || len(p.Lines) != 0 {
		t.Errorf("a function with no logs: %v %+v", err, p)
	}
}

// Under the byte budget the oldest logs go first: at a prune, and as soon
// as a sixteenth of the budget has come in since the last one.
func TestLogsPrunedByBytes(t *testing.T) {
	h, _, _ := newHistory(t, Config{HistoryMaxLogBytes: 64})
	ctx := context.Background()
	for i := range 5 {
		h.Record(ctx, invocation("echo", fmt.Sprintf("%d:%s\n", i, strings.Repeat("x", 20))))
	}
	// Each record is 23 bytes, over 64/16: every record prunes, and the
	// newest two fit in 64 bytes.
	p, err := h.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(p.Lines); len(got) != 2 || !strings.HasPrefix(got[0], "output:3:") || !strings.HasPrefix(got[1], "output:4:") {
		t.Fatalf("left %q", got)
	}
	if recs, _ := h.ListInvocations(ctx, "echo", 10, time.Time{}, ""); len(recs) != 5 {
		t.Errorf("%d records left, want all 5 (only logs are over budget)", len(recs))
	}
}
