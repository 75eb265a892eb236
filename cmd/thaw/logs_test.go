package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/logtest"
	"github.com/thaw-dev/thaw/wire"
)

// printEvent is an event the fake guest answers with these logs.
func printEvent(t *testing.T, output, kernel string) string {
	t.Helper()
	b, err := json.Marshal(map[string]string{"print": output, "kernel": kernel})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// invokeID runs thaw -o json invoke with args and returns the
// invocation's document.
func invokeDoc(t *testing.T, d *realDaemon, args ...string) wire.Invocation {
	t.Helper()
	r := d.thaw(t, append([]string{"-o", "json", "invoke"}, args...)...)
	wantCode(t, r, 0)
	var inv wire.Invocation
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil {
		t.Fatalf("invoke -o json: %v", err)
	}
	return inv
}

// TestInvokeLogs: thaw invoke --logs prints the invocation's output and
// kernel messages on stderr under a line of thaw's own, stdout still the
// result alone; -o json has them in the document only when asked; an
// older agent's invocation says why there are none.
func TestInvokeLogs(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.KeepAlive, c.MaxLogBytes = -1, 8192 })
	r := d.thaw(t, "info")
	wantCode(t, r, 0)
	wantContains(t, "thaw info", r.stdout, "8.0 KiB of output per invocation, 1.0 GiB in all")
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	ev := printEvent(t, "first line\nsecond\n", "[    1.000000] oom-kill\n")
	r = d.thaw(t, "invoke", "echo", "--logs", "--event", ev)
	wantCode(t, r, 0)
	var result map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &result); err != nil || result["print"] != "first line\nsecond\n" {
		t.Fatalf("stdout is not the result alone: %q (%v)", r.stdout, err)
	}
	wantContains(t, "stderr", r.stderr, "logs of inv-", ":\n  | first line\n  | second\nkernel messages:\n  | [    1.000000] oom-kill\n")

	inv := invokeDoc(t, d, "echo", "--logs", "--event", ev)
	if inv.Logs == nil || inv.Logs.Output != "first line\nsecond\n" || inv.Logs.OutputBytes != 18 || inv.Logs.Kernel == "" {
		t.Fatalf("-o json invoke --logs: logs %+v", inv.Logs)
	}
	if inv := invokeDoc(t, d, "echo", "--event", ev); inv.Logs != nil {
		t.Errorf("-o json invoke without --logs has logs: %+v", inv.Logs)
	}
	r = d.thaw(t, "invoke", "echo", "--logs", "--event", `{}`)
	wantCode(t, r, 0)
	wantContains(t, "stderr of a silent invocation", r.stderr, ": nothing written\n")
	r = d.thaw(t, "invoke", "echo", "--logs", "--event", `{"op": "nologs"}`)
	wantCode(t, r, 0)
	wantContains(t, "stderr of an older agent's invocation", r.stderr, "thaw: warning: no logs of inv-", "predates output capture")
}

// TestLogsCommand: thaw logs prints a function's lines oldest first, each
// with its invocation; --invocation, --since, -q and -o json select and
// shape them; bad values are usage errors and unknown names errors.
func TestLogsCommand(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.KeepAlive = -1 })
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	first := invokeDoc(t, d, "echo", "--event", printEvent(t, "one\ntwo\n", ""))
	second := invokeDoc(t, d, "echo", "--event", printEvent(t, "three", "[    2.000000] segfault\n"))

	r := d.thaw(t, "logs", "echo")
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	want := []string{first.ID + " one", first.ID + " two", second.ID + " three", second.ID + " kernel: [    2.000000] segfault"}
	if len(lines) != len(want) {
		t.Fatalf("thaw logs printed %d lines, want %d:\n%s", len(lines), len(want), r.stdout)
	}
	for i, w := range want {
		if !strings.HasSuffix(lines[i], " "+w) {
			t.Errorf("line %d %q, want it to end with %q", i, lines[i], w)
		}
	}

	r = d.thaw(t, "logs", "echo", "--invocation", second.ID, "-q")
	wantCode(t, r, 0)
	if r.stdout != "three\nkernel: [    2.000000] segfault\n" {
		t.Errorf("--invocation -q printed %q", r.stdout)
	}
	r = d.thaw(t, "-o", "json", "logs", "echo", "--since", "1h")
	wantCode(t, r, 0)
	var page wire.List[wire.LogLine]
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Items) != 4 {
		t.Fatalf("-o json logs: %v, %d lines", err, len(page.Items))
	}
	if l := page.Items[3]; l.Invocation != second.ID || l.Function != "echo" || l.Stream != wire.StreamKernel {
		t.Errorf("-o json's last line: %+v", l)
	}
	r = d.thaw(t, "logs", "echo", "--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	wantCode(t, r, 0)
	if r.stdout != "" {
		t.Errorf("--since an hour ahead printed %q", r.stdout)
	}

	for _, args := range [][]string{
		{"logs", "echo", "--since", "yesterday"},
		{"logs", "echo", "--since", "-5m"},
		{"logs", "echo", "--follow", "--invocation", first.ID},
		{"logs", "echo", "--invocation", "not-an-id"},
		{"logs"},
	} {
		r := d.thaw(t, args...)
		wantCode(t, r, cli.ExitUsage)
		if r.stdout != "" {
			t.Errorf("%v printed %q on stdout", args, r.stdout)
		}
	}
	for _, args := range [][]string{{"logs", "nope"}, {"logs", "echo", "--invocation", "inv-000000000000"}} {
		r := d.thaw(t, args...)
		wantCode(t, r, cli.ExitError)
		wantContains(t, strings.Join(args, " "), r.stderr, "not found")
	}
}

// TestLogsFollow: thaw logs --follow (a real process) prints the lines
// there are, then an invocation's as it ends, and Ctrl-C ends it cleanly:
// exit code 0, nothing on stderr.
func TestLogsFollow(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.KeepAlive = -1 })
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	invokeDoc(t, d, "echo", "--event", printEvent(t, "before\n", ""))
	for _, format := range []string{"table", "json"} {
		cmd := thawCommand(t, "--url", d.srv.URL, "-o", format, "logs", "echo", "--follow")
		var out, errb logtest.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return strings.Contains(out.String(), "before") })
		time.Sleep(300 * time.Millisecond) // its next request waits on the daemon
		later := invokeDoc(t, d, "echo", "--event", printEvent(t, "later "+format+"\n", ""))
		waitFor(t, func() bool { return strings.Contains(out.String(), "later "+format) })
		if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
			t.Fatal(err)
		}
		err := cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 0 || errb.String() != "" {
			t.Errorf("-o %s: Ctrl-C ended --follow with exit code %d (%v), stderr %q", format, code, err, errb.String())
		}
		if format == "json" { // JSON Lines: one document a line
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var l wire.LogLine
			if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil || l.Invocation != later.ID || l.Text != "later json" {
				t.Errorf("-o json --follow's last line %q: %v %+v", lines[len(lines)-1], err, l)
			}
		}
	}
}

// TestLogsGuestTextEscaped: a function's hostile output reaches neither
// thaw logs' nor thaw invoke --logs' terminal raw, nor passes for thaw's
// own lines, and is still shown.
func TestLogsGuestTextEscaped(t *testing.T) {
	evil := hostileText()
	logs := &wire.InvocationLogs{Output: evil, OutputBytes: int64(len(evil)), Kernel: evil, TraceID: evil}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/functions/evil/invoke", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, wire.Invocation{ID: "inv-1", Function: "evil", Mode: "cold", OK: true, Result: json.RawMessage(`1`), Logs: logs})
	})
	mux.HandleFunc("POST /v1/functions/old/invoke", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, wire.Invocation{ID: "inv-2", Function: "old", Mode: "cold", OK: true, Result: json.RawMessage(`1`),
			Logs: &wire.InvocationLogs{Missing: evil}})
	})
	mux.HandleFunc("GET /v1/functions/evil/logs", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, wire.LogPage{Next: "x", Items: []wire.LogLine{
			{Time: time.Now(), Function: "evil", Invocation: evil, TraceID: evil, Stream: wire.StreamOutput, Text: evil},
			{Time: time.Now(), Function: "evil", Invocation: "inv-1", Stream: wire.StreamKernel, Text: evil}}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f := &fakeDaemon{Server: srv}
	for _, args := range [][]string{
		{"invoke", "evil", "--logs"}, {"invoke", "old", "--logs"}, {"logs", "evil"}, {"-o", "wide", "logs", "evil"},
	} {
		r := f.thaw(t, args...)
		wantCode(t, r, 0)
		wantTerminalSafe(t, strings.Join(args, " ")+": stdout", r.stdout)
		wantTerminalSafe(t, strings.Join(args, " ")+": stderr", r.stderr)
		if !strings.Contains(r.stdout+r.stderr, `\x1b[2J`) {
			t.Errorf("%v: the guest's text is not shown escaped:\n%s\n%s", args, r.stdout, r.stderr)
		}
	}
	r := f.thaw(t, "-o", "json", "logs", "evil")
	wantCode(t, r, 0)
	wantTerminalSafe(t, "-o json logs: stdout", r.stdout)
	var page wire.List[wire.LogLine]
	if err := json.Unmarshal([]byte(r.stdout), &page); err != nil || len(page.Items) != 2 || page.Items[0].Text != evil {
		t.Errorf("-o json logs does not decode to the guest's text: %v", err)
	}
}
