package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/wire"
)

// printEvent is an event the fake agent answers with these logs.
func printEvent(output, kernel string) json.RawMessage {
	b, _ := json.Marshal(map[string]string{"print": output, "kernel": kernel})
	return b
}

func lineTexts(lines []wire.LogLine) []string {
	var out []string
	for _, l := range lines {
		out = append(out, l.Stream+":"+l.Text)
	}
	return out
}

// TestLogsKeptWithTheHistory: an invocation's output and kernel messages
// are in its answer and in the function's logs, line by line, each line
// naming its invocation, warm and cold alike; an invocation that wrote
// nothing keeps no logs, and an agent that sends none says why.
func TestLogsKeptWithTheHistory(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.KeepAlive = -1 })
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	warm, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent("one\n\ntwo", "[    5.000000] oom\n")})
	if err != nil || warm.Logs == nil || warm.Logs.Output != "one\n\ntwo" || warm.Logs.OutputBytes != 8 || warm.Logs.Kernel == "" || warm.Logs.Missing != "" {
		t.Fatalf("warm: %v %+v", err, warm.Logs)
	}
	if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	old, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{"op":"nologs"}`)})
	if err != nil || old.Logs == nil || old.Logs.Missing != history.LogsMissingAgent {
		t.Fatalf("an older agent's invocation: %v %+v", err, old.Logs)
	}
	cold, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: printEvent("cold\n", "")}})
	if err != nil || cold.Mode != "cold" {
		t.Fatal(err)
	}
	page, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"output:one", "output:", "output:two", "kernel:[    5.000000] oom", "output:cold"}
	if got := lineTexts(page.Lines); strings.Join(got, "|") != strings.Join(want, "|") || page.More {
		t.Fatalf("lines %q, want %q (more %v)", got, want, page.More)
	}
	for i, l := range page.Lines {
		inv := warm
		if i == 4 {
			inv = cold
		}
		if l.Invocation != inv.ID || l.Function != "echo" || l.Time.IsZero() {
			t.Errorf("line %d: %+v, want invocation %s", i, l, inv.ID)
		}
	}
	// The history's record does not carry the logs a second time.
	recs, _ := s.ListInvocations(ctx, "echo", 10, time.Time{}, "")
	for _, r := range recs {
		if strings.Contains(string(r.Detail), `"logs"`) {
			t.Errorf("record %s holds logs: %s", r.ID, r.Detail)
		}
	}
	// One invocation's alone; then nothing after the last position.
	one, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", Invocation: cold.ID})
	if err != nil || len(one.Lines) != 1 || one.Lines[0].Text != "cold" {
		t.Fatalf("one invocation's: %v %+v", err, one)
	}
	after, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", After: page.Next})
	if err != nil || len(after.Lines) != 0 || after.Next != page.Next {
		t.Fatalf("after the end: %v %+v", err, after)
	}
	since, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", Since: time.Now().Add(time.Minute)})
	if err != nil || len(since.Lines) != 0 {
		t.Fatalf("since later: %v %+v", err, since)
	}
}

// TestLogsInPages: a page ends at its limit, wherever that is in an
// invocation's lines, and Next takes up there.
func TestLogsInPages(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	var want []string
	for i := range 3 {
		var lines []string
		for j := range 3 {
			lines = append(lines, fmt.Sprintf("%d.%d", i, j))
		}
		want = append(want, lines...)
		if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent(strings.Join(lines, "\n")+"\n", "")}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	pos := LogPosition{}
	for range 10 {
		page, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", After: pos, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range page.Lines {
			got = append(got, l.Text)
		}
		pos = page.Next
		if !page.More {
			break
		}
		if len(page.Lines) != 2 {
			t.Fatalf("a page with more after it has %d lines", len(page.Lines))
		}
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("paged %q, want %q", got, want)
	}
}

// TestLogsWait: a request that finds nothing waits for the next
// invocation's logs and answers them at once; one whose caller goes away
// ends; one whose wait passes answers an empty page.
func TestLogsWait(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	start, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil || len(start.Lines) != 0 {
		t.Fatalf("%v %+v", err, start)
	}
	got := make(chan *LogsPage, 1)
	go func() {
		p, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", After: start.Next, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- p
	}()
	time.Sleep(100 * time.Millisecond) // the follower waits by now
	// An invocation that writes nothing wakes it, and it waits on.
	if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent("news\n", "")}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if len(p.Lines) != 1 || p.Lines[0].Text != "news" {
			t.Fatalf("followed %+v", p)
		}
		t.Logf("the follower had the line %s after the invocation", time.Since(t0))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request did not answer the new line")
	}

	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		p, err := s.FunctionLogs(cctx, LogsRequest{Function: "echo", After: LogPosition{Seq: 1 << 40}, Wait: 30 * time.Second})
		if err == nil && len(p.Lines) != 0 {
			err = fmt.Errorf("lines %+v", p.Lines)
		}
		done <- err
	}()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil { // answered as a wait that passed: empty
			t.Errorf("canceled wait: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a canceled wait did not end")
	}
	t0 = time.Now()
	p, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo", After: LogPosition{Seq: 1 << 40}, Wait: 200 * time.Millisecond})
	if err != nil || len(p.Lines) != 0 || time.Since(t0) < 200*time.Millisecond {
		t.Errorf("a wait that passed: %v %+v after %s", err, p, time.Since(t0))
	}
}

// TestLogsRequestsRefused: what cannot be answered is refused with what
// is wrong, and a deleted function's logs stay readable.
func TestLogsRequestsRefused(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	createFn(t, s, "other")
	inv, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent("kept\n", "")})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		req  LogsRequest
		kind error
		says string
	}{
		{LogsRequest{Function: "no/such"}, ErrInvalid, "name"},
		{LogsRequest{Function: "ghost"}, ErrNotFound, `function "ghost"`},
		{LogsRequest{Function: "other", Invocation: inv.ID}, ErrInvalid, `is of function "echo", not "other"`},
		{LogsRequest{Function: "echo", Invocation: "inv-000000000000"}, ErrNotFound, "not in the history"},
		{LogsRequest{Function: "echo", Invocation: "inv-x"}, ErrInvalid, "malformed"},
		{LogsRequest{Function: "echo", Limit: MaxLogPage + 1}, ErrInvalid, "limit"},
		{LogsRequest{Function: "echo", Wait: 2 * MaxLogWait}, ErrInvalid, "wait"},
		{LogsRequest{Function: "echo", After: LogPosition{Seq: -1}}, ErrInvalid, "negative"},
	} {
		_, err := s.FunctionLogs(ctx, c.req)
		if !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: %v, want %v saying %q", c.req, err, c.kind, c.says)
		}
	}
	if _, err := s.DeleteFunctionWith(ctx, "echo", true); err != nil {
		t.Fatal(err)
	}
	if p, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo"}); err != nil || len(p.Lines) != 1 {
		t.Errorf("a deleted function's logs: %v %+v", err, p)
	}
}

// TestLogsPrunedWithTheHistory: the logs go with their records, and under
// the byte budget the oldest go first.
func TestLogsPrunedWithTheHistory(t *testing.T) {
	s, _ := fakeService(t, func(c *Config) { c.HistoryMax, c.HistoryMaxLogBytes = 3, 64 })
	ctx := context.Background()
	vm, _ := bootAndSnapshot(t, s, "echo")
	for i := range 5 {
		if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent(fmt.Sprintf("%d:%s\n", i, strings.Repeat("x", 20)), "")}); err != nil {
			t.Fatal(err)
		}
	}
	s.history.Prune(ctx)
	p, err := s.FunctionLogs(ctx, LogsRequest{Function: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	// 3 records left; of their logs (23 bytes each) the newest two fit in 64 bytes.
	if got := lineTexts(p.Lines); len(got) != 2 || !strings.HasPrefix(got[0], "output:3:") || !strings.HasPrefix(got[1], "output:4:") {
		t.Fatalf("left %q", got)
	}
	if recs, _ := s.ListInvocations(ctx, "echo", 10, time.Time{}, ""); len(recs) != 3 {
		t.Errorf("%d records left, want 3", len(recs))
	}
}

// TestLogsCarryTheTrace: with tracing on, an invocation's logs and their
// lines name the trace of the request that invoked.
func TestLogsCarryTheTrace(t *testing.T) {
	s, _, tp, sr := tracedService(t, nil)
	vm, _ := bootAndSnapshot(t, s, "echo")
	var inv *Invocation
	req, _ := request(t, tp, sr, func(ctx context.Context) {
		var err error
		if inv, err = s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: printEvent("traced\n", "")}); err != nil {
			t.Fatal(err)
		}
	})
	want := req.SpanContext().TraceID().String()
	if inv.Logs == nil || inv.Logs.TraceID != want {
		t.Fatalf("logs %+v, want trace %s", inv.Logs, want)
	}
	p, err := s.FunctionLogs(context.Background(), LogsRequest{Function: "echo"})
	if err != nil || len(p.Lines) != 1 || p.Lines[0].TraceID != want || p.Lines[0].Invocation != inv.ID {
		t.Fatalf("lines %v %+v", err, p)
	}
}
