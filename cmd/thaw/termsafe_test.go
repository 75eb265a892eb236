package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/termtext"
	"github.com/thaw-dev/thaw/wire"
)

// hostileText is what a hostile guest writes into every text it controls:
// each C0 control (newline and tab among them), DEL, each C1 control,
// escape sequences that clear the screen, set the window title and colour
// the text, and lines forged to pass for thaw's own.
func hostileText() string {
	var b strings.Builder
	b.WriteString("\x1b[2J\x1b]0;title\x07\x1b[31mred ")
	for c := byte(0); c < 0x20; c++ {
		b.WriteByte(c)
	}
	b.WriteByte(0x7f)
	for r := rune(0x80); r <= 0x9f; r++ {
		b.WriteRune(r)
	}
	b.WriteString("\nthaw: all good\nFORGED line\rthaw: all good")
	return b.String()
}

// forgedStarts are how a line begins that only hostileText's newlines can
// start: after its C0 run's newline, and its two forged lines.
var forgedStarts = []string{"\x0b", `\x0b`, "thaw: all good", "FORGED"}

// hostileDaemon answers with documents of the real wire types whose
// guest-controlled text is hostileText, and keeps each body it served.
type hostileDaemon struct {
	*httptest.Server
	mu     sync.Mutex
	served map[string][]byte // body by "METHOD /path"
	polls  int               // GETs of op-boot so far
}

func newHostileDaemon(t *testing.T) *hostileDaemon {
	t.Helper()
	evil := hostileText()
	d := &hostileDaemon{served: map[string][]byte{}}
	raised := wire.Invocation{ID: "inv-1", Function: "evil", VM: "vm-1", Mode: "cold", Snapshot: "snap-1", Strategy: "file",
		Error:  &wire.FunctionError{Type: evil, Message: evil, Traceback: "Traceback (most recent call last):\n  File \"handler.py\", line 3\n" + evil + "\n"},
		Timing: wire.Timing{InvokeMS: 2, GuestMS: 1, TotalMS: 10}, StrategyStats: &wire.StrategyStats{Fallback: evil}}
	result, _ := json.Marshal(map[string]string{"greeting": evil})
	good := wire.Invocation{ID: "inv-2", Function: "good", VM: "vm-1", Mode: "cold", OK: true, Result: result, Timing: wire.Timing{TotalMS: 3}}
	hook := wire.Invocation{ID: "inv-3", Function: "evil", VM: "vm-warm", Mode: "warm",
		Error: &wire.FunctionError{Type: "RuntimeError", Message: "on_restore() failed: " + evil}}
	failedVM := wire.VM{ID: "vm-bad", Function: "evil", State: "failed", Reason: "qemu exited; guest console: " + evil, CreatedAt: time.Now()}
	vmErr := wire.Error{Error: wire.ErrorDetail{Code: "vm_failed", Message: "vm vm-2: boot: guest agent not ready; guest console: " + evil}}
	failedOp := func(id string) wire.Operation {
		return wire.Operation{ID: id, Kind: wire.OpBoot, Target: "evil", State: wire.OpFailed, Progress: wire.OperationProgress{Phase: evil},
			Error: &wire.OperationError{Status: 502, ErrorDetail: vmErr.Error}}
	}
	running := wire.Operation{ID: "op-boot", Kind: wire.OpBoot, Target: "evil", State: wire.OpRunning, Progress: wire.OperationProgress{Phase: evil}}

	mux := http.NewServeMux()
	d.answer(mux, "POST /v1/functions/evil/invoke", 200, raised)
	d.answer(mux, "POST /v1/functions/good/invoke", 200, good)
	d.answer(mux, "POST /v1/functions/gone/invoke", 502, vmErr)
	d.answer(mux, "GET /v1/vms/vm-warm", 200, wire.VM{ID: "vm-warm", Function: "evil", State: "running"})
	d.answer(mux, "POST /v1/vms/vm-warm/invoke", 200, hook)
	d.answer(mux, "GET /v1/invocations", 200, wire.List[wire.InvocationRecord]{Items: []wire.InvocationRecord{
		{ID: "inv-1", Function: "evil", VM: "vm-1", Detail: raised, CreatedAt: time.Now()}}})
	d.answer(mux, "GET /v1/vms", 200, wire.List[wire.VM]{Items: []wire.VM{failedVM}})
	d.answer(mux, "GET /v1/vms/vm-bad", 200, failedVM)
	d.answer(mux, "DELETE /v1/vms/vm-a", 502, vmErr)
	d.answer(mux, "DELETE /v1/vms/vm-b", 204, nil)
	d.answer(mux, "POST /v1/vms", 202, running)
	d.answer(mux, "GET /v1/operations/op-failed", 200, failedOp("op-failed"))
	d.answer(mux, "GET /v1/operations", 200, wire.List[wire.Operation]{Items: []wire.Operation{failedOp("op-failed")}})
	d.answer(mux, "GET /v1/info", 500, wire.Error{Error: wire.ErrorDetail{Code: "internal", Message: evil}})
	// op-boot runs one poll with its hostile phase, then fails.
	mux.HandleFunc("GET /v1/operations/op-boot", func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.polls++
		op := running
		if d.polls > 1 {
			op = failedOp("op-boot")
		}
		d.mu.Unlock()
		writeJSON(w, 200, op)
	})
	d.Server = httptest.NewServer(mux)
	t.Cleanup(d.Close)
	return d
}

// answer serves v, encoded once, at route.
func (d *hostileDaemon) answer(mux *http.ServeMux, route string, status int, v any) {
	var body []byte
	if v != nil {
		body, _ = json.Marshal(v)
	}
	d.served[route] = body
	mux.HandleFunc(route, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		w.Write(body)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

func (d *hostileDaemon) thaw(t *testing.T, args ...string) result {
	t.Helper()
	f := &fakeDaemon{Server: d.Server}
	return f.thaw(t, args...)
}

// wantTerminalSafe fails if out holds a raw control character other than
// newline and tab, is not UTF-8, or has a line that hostile text began.
func wantTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s is not UTF-8: %q", what, out)
	}
	for i, r := range out {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
			t.Errorf("%s has a raw %U at byte %d: %q", what, r, i, out)
			break
		}
	}
	for _, line := range strings.Split(out, "\n") {
		for _, start := range forgedStarts {
			if strings.HasPrefix(line, start) {
				t.Errorf("%s has a line the guest began: %q", what, line)
			}
		}
	}
}

// TestGuestTextEscaped runs every command that prints text a guest
// controls against a daemon whose every such text is hostile: nothing
// raw reaches the terminal, no guest line passes for thaw's own, and the
// text is still shown (escaped).
func TestGuestTextEscaped(t *testing.T) {
	d := newHostileDaemon(t)
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"invoke", "evil"}, cli.ExitFunction},                    // type, message, traceback, fallback
		{[]string{"invoke", "good"}, cli.ExitOK},                          // the result
		{[]string{"invoke", "evil", "--vm", "vm-warm"}, cli.ExitFunction}, // an on_restore error
		{[]string{"invoke", "gone"}, cli.ExitError},                       // an API error quoting the console
		{[]string{"--json", "invoke", "evil"}, cli.ExitFunction},          // stderr's summary
		{[]string{"invocations"}, cli.ExitOK},
		{[]string{"vm", "list", "--state", "failed"}, cli.ExitOK},
		{[]string{"vm", "get", "vm-bad"}, cli.ExitOK},
		{[]string{"vm", "delete", "vm-a", "vm-b"}, cli.ExitError},
		{[]string{"vm", "boot", "evil"}, cli.ExitError}, // progress, then the operation's error
		{[]string{"operation", "get", "op-failed"}, cli.ExitOK},
		{[]string{"operation", "list"}, cli.ExitOK},
		{[]string{"operation", "wait", "op-failed"}, cli.ExitError},
		{[]string{"version"}, cli.ExitOK},
	} {
		r := d.thaw(t, c.args...)
		if r.code != c.code {
			t.Errorf("%v: exit code %d, want %d", c.args, r.code, c.code)
		}
		if c.args[0] != "--json" { // --json's stdout: TestJSONOutputUnchanged
			wantTerminalSafe(t, strings.Join(c.args, " ")+": stdout", r.stdout)
		}
		wantTerminalSafe(t, strings.Join(c.args, " ")+": stderr", r.stderr)
		// Shown: ESC as thaw escapes it, or as JSON does (a result, a
		// valid JSON document on stdout).
		if out := r.stdout + r.stderr; !strings.Contains(out, `\x1b[2J`) && !strings.Contains(out, `\u001b[2J`) {
			t.Errorf("%v: the guest's text is not shown escaped:\n%s\n%s", c.args, r.stdout, r.stderr)
		}
	}
}

// TestFunctionErrorLayout: a handler's error is thaw's line, the
// message's further lines and the traceback marked under it.
func TestFunctionErrorLayout(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/functions/f/invoke", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, wire.Invocation{ID: "inv-1", Function: "f", Mode: "warm", Error: &wire.FunctionError{
			Type: "ValueError", Message: "bad input\nthaw: all good\x1b[2J",
			Traceback: "Traceback (most recent call last):\n  File \"handler.py\", line 3, in handle\nValueError: bad input\nthaw: all good\x1b[2J\n"}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r := (&fakeDaemon{Server: srv}).thaw(t, "invoke", "f")
	wantCode(t, r, cli.ExitFunction)
	want := "thaw: function f raised ValueError: bad input\n" +
		"  | thaw: all good\\x1b[2J\n" +
		"  | Traceback (most recent call last):\n" +
		"  |   File \"handler.py\", line 3, in handle\n" +
		"  | ValueError: bad input\n" +
		"  | thaw: all good\\x1b[2J\n"
	// The error comes last on stderr, after where the time went.
	if !strings.HasSuffix(r.stderr, "\n"+want) || r.stdout != "" {
		t.Errorf("stdout %q, stderr\n%s\nwant it to end with\n%s", r.stdout, r.stderr, want)
	}
}

// TestJSONOutputUnchanged: --json prints the daemon's documents as the
// JSON encoder writes them, hostile text included: its escapes (\u001b)
// once, nothing of the terminal escaping, and DEL and C1 controls (which
// JSON leaves raw) as \u escapes too, so the document decodes the same.
func TestJSONOutputUnchanged(t *testing.T) {
	d := newHostileDaemon(t)
	for _, c := range []struct {
		args  []string
		route string
		want  func([]byte) ([]byte, error)
	}{
		{[]string{"invoke", "evil"}, "POST /v1/functions/evil/invoke", reencode[wire.Invocation]},
		{[]string{"invoke", "good"}, "POST /v1/functions/good/invoke", reencode[wire.Invocation]},
		{[]string{"invoke", "evil", "--vm", "vm-warm"}, "POST /v1/vms/vm-warm/invoke", reencode[wire.Invocation]},
		{[]string{"invocations"}, "GET /v1/invocations", reencode[wire.List[wire.InvocationRecord]]},
		{[]string{"vm", "list", "--state", "all"}, "GET /v1/vms", reencode[wire.List[wire.VM]]},
		{[]string{"vm", "get", "vm-bad"}, "GET /v1/vms/vm-bad", reencode[wire.VM]},
		{[]string{"operation", "get", "op-failed"}, "GET /v1/operations/op-failed", reencode[wire.Operation]},
		{[]string{"operation", "list"}, "GET /v1/operations", reencode[wire.List[wire.Operation]]},
	} {
		r := d.thaw(t, append([]string{"--json"}, c.args...)...)
		want, err := c.want(d.served[c.route])
		if err != nil {
			t.Fatal(err)
		}
		if r.stdout != string(want)+"\n" {
			t.Errorf("--json %v printed\n%s\nwant\n%s", c.args, r.stdout, want)
		}
		if !strings.Contains(r.stdout, `\u001b[2J`) || strings.Contains(r.stdout, `\\u001b`) || strings.Contains(r.stdout, `\x1b`) {
			t.Errorf("--json %v: the guest's text is not in the JSON encoder's escapes exactly once:\n%s", c.args, r.stdout)
		}
		wantTerminalSafe(t, "--json "+strings.Join(c.args, " ")+": stderr", r.stderr)
		wantTerminalSafe(t, "--json "+strings.Join(c.args, " ")+": stdout", r.stdout)
	}
}

// reencode is the document body as the CLI's JSON printer writes it:
// decoded into its wire type and indented.
func reencode[T any](body []byte) ([]byte, error) {
	var v T
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&v); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	return termtext.JSON(b), err
}
