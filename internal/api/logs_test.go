package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// An invocation answers its logs only when asked (logs: true); the
// function's logs have them either way, line by line, and a follower's
// long poll answers the next invocation's lines as soon as they are kept.
// Every answer is checked against openapi.json.
func TestFunctionLogsOverTheAPI(t *testing.T) {
	srv, c, vm := bootedEcho(t)
	ctx := context.Background()
	resp, body := send(t, srv, "POST", "/v1/vms/"+vm.ID+"/invoke", `{"event":{"print":"not asked\n"}}`)
	if resp.StatusCode != http.StatusOK || strings.Contains(string(body), `"logs"`) {
		t.Fatalf("%d %s: logs answered without being asked", resp.StatusCode, body)
	}
	inv, err := c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"print":"asked\n","kernel":"[    1.000000] k\n"}`), client.InvokeOptions{Logs: true})
	if err != nil || inv.Logs == nil || inv.Logs.Output != "asked\n" || inv.Logs.OutputBytes != 6 || inv.Logs.Kernel != "[    1.000000] k\n" {
		t.Fatalf("asked: %v %+v", err, inv)
	}
	page, err := c.FunctionLogs(ctx, "echo", client.LogsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, l := range page.Items {
		got = append(got, l.Stream+" "+l.Text)
	}
	if strings.Join(got, "|") != "output not asked|output asked|kernel [    1.000000] k" || page.Next == "" || page.More {
		t.Fatalf("lines %q, next %q, more %v", got, page.Next, page.More)
	}
	if page.Items[1].Invocation != inv.ID {
		t.Errorf("line %+v names invocation %s, want %s", page.Items[1], page.Items[1].Invocation, inv.ID)
	}
	if p, err := c.FunctionLogs(ctx, "echo", client.LogsQuery{Invocation: inv.ID, Limit: 1}); err != nil || len(p.Items) != 1 || !p.More {
		t.Errorf("one line of one invocation: %v %+v", err, p)
	}
	if p, err := c.FunctionLogs(ctx, "echo", client.LogsQuery{Since: time.Now().Add(time.Hour)}); err != nil || len(p.Items) != 0 || p.Next == "" {
		t.Errorf("since later: %v %+v", err, p)
	}

	// A follower: nothing after next yet, so the request waits.
	followed := make(chan *client.LogPage, 1)
	go func() {
		p, err := c.FunctionLogs(ctx, "echo", client.LogsQuery{After: page.Next, Wait: 30 * time.Second})
		if err != nil {
			t.Error(err)
		}
		followed <- p
	}()
	time.Sleep(100 * time.Millisecond)
	if _, err := c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"print":"later\n"}`), client.InvokeOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-followed:
		if len(p.Items) != 1 || p.Items[0].Text != "later" || p.Next == page.Next {
			t.Fatalf("followed %+v", p)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting request did not answer")
	}
}

// What GET /v1/functions/{name}/logs cannot answer is 400 or 404, saying
// why.
func TestFunctionLogsRefusals(t *testing.T) {
	_, _, srv, _ := fakeDaemon(t)
	for _, c := range []struct {
		target string
		status int
		says   string
	}{
		{"/v1/functions/echo/logs?since=yesterday", 400, "since"},
		{"/v1/functions/echo/logs?since=-5m", 400, "since"},
		{"/v1/functions/echo/logs?after=" + url.QueryEscape("not a cursor"), 400, "not a position"},
		{"/v1/functions/echo/logs?after=" + cursor("5:x"), 400, "not a position"},
		{"/v1/functions/echo/logs?limit=10001", 400, "limit"},
		{"/v1/functions/echo/logs?limit=x", 400, "not a number"},
		{"/v1/functions/echo/logs?wait_s=61", 400, "wait_s"},
		{"/v1/functions/echo/logs?invocation=inv-nope", 400, "malformed"},
		{"/v1/functions/echo/logs?invocation=inv-0123456789ab", 404, "not in the history"},
		{"/v1/functions/Echo/logs", 400, "function name"},
		{"/v1/functions/ghost/logs", 404, "ghost"},
	} {
		resp, body := send(t, srv, "GET", c.target, "")
		if resp.StatusCode != c.status || !strings.Contains(string(body), c.says) {
			t.Errorf("GET %s: %d %s, want %d saying %q", c.target, resp.StatusCode, body, c.status, c.says)
		}
	}
	// Both forms of since.
	now := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{"10m": now.Add(-10 * time.Minute), "2026-11-27T09:00:00Z": now.Add(-time.Hour), "": {}} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("since %q: %v %v, want %v", in, got, err, want)
		}
	}
}
