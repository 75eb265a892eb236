package main

import (
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v4"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// jsonValue decodes a JSON document, failing t if it is not one.
func jsonValue(t *testing.T, what, doc string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s is not a JSON document: %v\n%s", what, err, doc)
	}
	return v
}

// yamlValue decodes a YAML document into the values JSON would give.
func yamlValue(t *testing.T, what, doc string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("%s is not a YAML document: %v\n%s", what, err, doc)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return jsonValue(t, what, string(b))
}

// stdout carries only the invocation's result, as JSON: timing goes to
// stderr, to stdout after the result with --timing, nowhere with -q; -o
// json and -o yaml print the invocation document, the same in both.
func TestInvokeStdoutIsTheResult(t *testing.T) {
	d := newRealDaemon(t, nil)
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	event := `{"greeting": "hello", "n": [1, 2.5], "nested": {"ok": true}}`

	r := d.thaw(t, "invoke", "echo", "--event", event)
	wantCode(t, r, 0)
	if got, want := jsonValue(t, "stdout", r.stdout), jsonValue(t, "the event", event); !reflect.DeepEqual(got, want) {
		t.Errorf("stdout %v, want the handler's result %v", got, want)
	}
	wantContains(t, "stderr", r.stderr, "invocation inv-", "restore setup", "total")

	r = d.thaw(t, "invoke", "echo", "--event", event, "--timing")
	wantCode(t, r, 0)
	result, timing, ok := strings.Cut(r.stdout, "\n\n")
	if !ok || !strings.Contains(timing, "invocation inv-") || !strings.Contains(timing, "total") || r.stderr != "" {
		t.Fatalf("--timing: stdout %q, stderr %q: want the result, a blank line and the timing on stdout", r.stdout, r.stderr)
	}
	jsonValue(t, "--timing's result", result)

	r = d.thaw(t, "invoke", "echo", "--event", event, "-q")
	wantCode(t, r, 0)
	if r.stderr != "" {
		t.Errorf("-q: stderr %q, want nothing", r.stderr)
	}
	jsonValue(t, "-q's stdout", r.stdout)

	rj := d.thaw(t, "-o", "json", "invoke", "echo", "--event", event)
	ry := d.thaw(t, "-o", "yaml", "invoke", "echo", "--event", event)
	wantCode(t, rj, 0)
	wantCode(t, ry, 0)
	inv, iny := jsonValue(t, "-o json", rj.stdout).(map[string]any), yamlValue(t, "-o yaml", ry.stdout).(map[string]any)
	if !reflect.DeepEqual(inv["result"], iny["result"]) || inv["function"] != "echo" || iny["function"] != "echo" || iny["ok"] != true {
		t.Errorf("-o json %v and -o yaml %v differ", inv, iny)
	}
	if _, ok := iny["timing"].(map[string]any)["total_ms"]; !ok {
		t.Errorf("-o yaml has no timing: %v", iny)
	}

	// A handler that raises: nothing on stdout, the error on stderr, 3.
	r = d.thaw(t, "invoke", "echo", "--event", `{"op": "raise"}`)
	wantCode(t, r, cli.ExitFunction)
	if r.stdout != "" {
		t.Errorf("a raised invocation printed %q on stdout", r.stdout)
	}
	wantContains(t, "stderr", r.stderr, "thaw: function echo raised ValueError: asked to")
}

// A timeout is visible: its error names the flags that set it and says
// the warm VM was killed; it is in the history; info shows the default.
func TestTimeoutsVisible(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.InvokeTimeout = 42 * time.Second })
	d.echoFunction(t, "echo")
	vm, _ := d.bootSnapshot(t, "echo")

	r := d.thaw(t, "invoke", "--help")
	wantContains(t, "invoke --help", r.stdout, "--vm string", "(a timeout kills the VM)", "thawd --invoke-timeout")

	r = d.thaw(t, "invoke", "echo", "--vm", vm, "--event", `{"op": "hang"}`, "--timeout-ms", "300")
	wantCode(t, r, cli.ExitError)
	wantContains(t, "stderr", r.stderr, "invocation timed out after 300ms", "thaw invoke --timeout-ms", "thawd --invoke-timeout (42s on this daemon)",
		"the VM was killed (a guest that does not answer cannot be trusted)")
	if r.stdout != "" {
		t.Errorf("a timeout printed %q on stdout", r.stdout)
	}

	lines := tableLines(t, &fakeDaemon{Server: d.srv}, 1, "invocations", "--function", "echo")
	if f := strings.Fields(lines[0]); strings.Join(f[:5], " ") != "ID FUNCTION OK MODE TOTAL" || f[len(f)-1] != "ERROR" {
		t.Errorf("invocations header %q: want ID FUNCTION OK MODE TOTAL first, ERROR last", lines[0])
	}
	wantContains(t, "the timed-out invocation", lines[1], "echo", " no ", "warm", "Timeout")

	r = d.thaw(t, "vm", "list", "--state", "failed", "-q")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != vm {
		t.Errorf("vm list --state failed -q: %q, want the killed VM %s", r.stdout, vm)
	}

	r = d.thaw(t, "info")
	wantCode(t, r, 0)
	wantContains(t, "info", r.stdout, "invoke timeout:", "42s (thaw invoke --timeout-ms, up to 1h0m0s; default thawd --invoke-timeout)",
		"boot timeout:", "10s", "event:", "6.0 MiB at most", "admission:", "keep-alive:", "VMM pool:", "history:", "versions:")
	info := jsonValue(t, "-o json info", d.thaw(t, "-o", "json", "info").stdout).(map[string]any)
	if l := info["limits"].(map[string]any); l["invoke_timeout_ms"] != 42000.0 || l["max_vms"].(float64) < 1 {
		t.Errorf("-o json info limits: %v", l)
	}
}

// A strategy that falls back warns first, on stderr; --strict refuses.
func TestFallbackWarnsAndStrictRefuses(t *testing.T) {
	d := newRealDaemon(t, nil)
	d.echoFunction(t, "echo")
	_, snap := d.bootSnapshot(t, "echo")

	r := d.thaw(t, "invoke", "echo", "--strategy", "premap", "--event", `{"x": 1}`)
	wantCode(t, r, 0)
	if !strings.HasPrefix(r.stderr, "thaw: warning: strategy premap fell back to vanilla: ") ||
		!strings.Contains(r.stderr, snap) || !strings.Contains(r.stderr, "--strict") {
		t.Errorf("stderr does not start with the fallback's warning:\n%s", r.stderr)
	}
	jsonValue(t, "stdout", r.stdout)

	r = d.thaw(t, "invoke", "echo", "--strategy", "premap", "--strict")
	wantFailure(t, r, cli.ExitError, "strict: premap cannot restore "+snap, "would fall back to vanilla", "thaw snapshot store "+snap)
	if r.stdout != "" {
		t.Errorf("a refused invocation printed %q", r.stdout)
	}
	r = d.thaw(t, "-o", "json", "invoke", "echo", "--strategy", "premap", "--strict")
	wantCode(t, r, cli.ExitError)
	e := jsonValue(t, "stderr", r.stderr).(map[string]any)["error"].(map[string]any)
	if e["code"] != "conflict" || !strings.HasPrefix(e["request_id"].(string), "req-") || !strings.Contains(e["message"].(string), "strict") {
		t.Errorf("-o json error: %v", e)
	}

	lines := tableLines(t, &fakeDaemon{Server: d.srv}, 1, "-o", "wide", "invocations")
	if f := strings.Fields(lines[0]); f[len(f)-1] != "FALLBACK" {
		t.Errorf("-o wide invocations header %q: want FALLBACK last", lines[0])
	}
	wantContains(t, "the fallen-back invocation", lines[1], "vanilla (fell back)", "premap artifacts unusable")
}

// vm list shows live VMs by default, a kept VM as idle; --state picks.
func TestVMListStates(t *testing.T) {
	d := newRealDaemon(t, func(c *daemon.Config) { c.KeepAlive, c.VMMPool = time.Minute, -1 })
	d.echoFunction(t, "echo")
	booted, _ := d.bootSnapshot(t, "echo")
	r := d.thaw(t, "-o", "json", "invoke", "echo")
	wantCode(t, r, 0)
	kept := jsonValue(t, "invocation", r.stdout).(map[string]any)["vm"].(string)
	r = d.thaw(t, "vm", "delete", booted, "-q")
	wantCode(t, r, 0)
	if r.stdout != "" {
		t.Errorf("vm delete -q printed %q", r.stdout)
	}

	lines := tableLines(t, &fakeDaemon{Server: d.srv}, 1, "vm", "list")
	wantContains(t, "vm list", lines[1], kept, "idle")
	for state, want := range map[string]string{"idle": kept, "running": "", "live": kept, "all": kept, "stopped": ""} {
		r := d.thaw(t, "vm", "list", "--state", state, "-q")
		wantCode(t, r, 0)
		if strings.TrimSpace(r.stdout) != want {
			t.Errorf("vm list --state %s -q: %q, want %q", state, r.stdout, want)
		}
	}
	r = d.thaw(t, "vm", "get", kept)
	wantCode(t, r, 0)
	wantContains(t, "vm get", r.stdout, "State:", "idle", "Idle until:", "in ")
	lines = tableLines(t, &fakeDaemon{Server: d.srv}, 1, "-o", "wide", "vm", "list")
	wantContains(t, "-o wide vm list", lines[0]+lines[1], "IDLE UNTIL", "vanilla")
	// A minute's keep-alive, listed a few seconds after the invocation at most.
	if !regexp.MustCompile(` in (60|5[0-9])s `).MatchString(lines[1]) {
		t.Errorf("-o wide vm list %q: want the idle time left within the minute", lines[1])
	}

	r = d.thaw(t, "vm", "list", "--state", "sleeping")
	wantFailure(t, r, cli.ExitUsage, `--state "sleeping"`, "live, booting, running, idle")
}

// thaw operation cancel stops a running boot.
func TestOperationCancelCLI(t *testing.T) {
	d := newRealDaemon(t, nil)
	d.echoFunction(t, "echo")
	release := d.vmm.HoldReady()
	defer release()
	// Cancel it at once (while its VMM starts), and again once it boots.
	for i := range 2 {
		r := d.thaw(t, "vm", "boot", "echo", "--detach")
		wantCode(t, r, 0)
		op := strings.TrimSpace(r.stdout)
		if i == 1 {
			waitFor(t, func() bool { return strings.Contains(d.thaw(t, "operation", "get", op).stdout, "booting") })
		}
		cancelBoot(t, d, op)
	}
}

// cancelBoot cancels boot operation op and checks it left no VM.
func cancelBoot(t *testing.T, d *realDaemon, op string) {
	t.Helper()
	r := d.thaw(t, "operation", "cancel", op)
	wantCode(t, r, 0)
	wantContains(t, "operation cancel", r.stdout, op, "failed", "499 canceled", "operation canceled (request req-")
	r = d.thaw(t, "operation", "cancel", op)
	wantFailure(t, r, cli.ExitError, "has already failed")
	r = d.thaw(t, "vm", "list", "-q")
	wantCode(t, r, 0)
	if r.stdout != "" {
		t.Errorf("a canceled boot left live VMs: %q", r.stdout)
	}
}

// Errors with -o json are a document on stderr with the daemon's request
// id; usage errors exit with 2 whatever is wrong.
func TestErrorsAndExitCodes(t *testing.T) {
	d := newRealDaemon(t, nil)
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	r := d.thaw(t, "-o", "json", "function", "get", "nope")
	wantCode(t, r, cli.ExitError)
	e := jsonValue(t, "stderr", r.stderr).(map[string]any)["error"].(map[string]any)
	if e["code"] != "not_found" || !strings.HasPrefix(e["request_id"].(string), "req-") || !strings.Contains(e["message"].(string), "nope") {
		t.Errorf("error document %v", e)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q", r.stdout)
	}
	r = d.thaw(t, "--json", "invoke")
	wantCode(t, r, cli.ExitUsage)
	if e := jsonValue(t, "stderr", r.stderr).(map[string]any)["error"].(map[string]any); e["code"] != "usage" {
		t.Errorf("usage error document %v", e)
	}
	r = d.thaw(t, "-o", "yaml", "snapshot", "get", "snap-000000000000")
	wantCode(t, r, cli.ExitError)
	if e := yamlValue(t, "stderr", r.stderr).(map[string]any)["error"].(map[string]any); e["code"] != "not_found" {
		t.Errorf("-o yaml error document %v", e)
	}

	for _, args := range [][]string{
		{"invoke", "echo", "--event-file", "/nonexistent/event.json"},
		{"function", "create", "x", "--dir", "/nonexistent/function"},
		{"deploy", "x", "--dir", "/nonexistent/function"},
		{"-o", "xml", "function", "list"},
		{"--json", "-o", "yaml", "function", "list"},
		{"-q", "-o", "json", "function", "list"},
		{"vm", "list", "--state", "gone"},
		{"invoke", "echo", "--vm", "vm-1", "--strict"},
		{"invocations", "--limit", "ten"},
		{"invoke", "echo", "--strategy", "nonesuch"},  // the daemon's 400
		{"invoke", "echo", "--timeout-ms", "7200000"}, // over the daemon's hour
	} {
		r := d.thaw(t, args...)
		wantFailure(t, r, cli.ExitUsage, "--help")
	}
}

// A run that a signal interrupts exits with 128 + the signal's number,
// having said so.
func TestInterruptExitCode(t *testing.T) {
	d := newRealDaemon(t, nil)
	d.echoFunction(t, "echo")
	d.bootSnapshot(t, "echo")
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(500*time.Millisecond, func() { cancel(&cli.Interruption{Sig: 2}) })
	var out, errb strings.Builder
	code := execute(ctx, []string{"--url", d.srv.URL, "invoke", "echo", "--event", `{"op": "hang"}`}, strings.NewReader(""), &out, &errb)
	if code != 130 || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 130", code, out.String(), errb.String())
	}
	wantContains(t, "stderr", errb.String(), "thaw: interrupted")
}

// Output conventions hold for deploys, versions and aliases too.
func TestDeployOutputConventions(t *testing.T) {
	d := newRealDaemon(t, nil)
	dir := d.echoFunction(t, "base")
	r := d.thaw(t, "deploy", "app", "--dir", dir, "-q")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != "app:1" || r.stderr != "" {
		t.Fatalf("deploy -q: stdout %q, stderr %q; want app:1 alone", r.stdout, r.stderr)
	}
	r = d.thaw(t, "function", "versions", "app", "-q")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != "1" {
		t.Errorf("function versions -q: %q", r.stdout)
	}
	r = d.thaw(t, "-o", "yaml", "function", "versions", "app")
	wantCode(t, r, 0)
	items := yamlValue(t, "versions", r.stdout).(map[string]any)["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["version"] != 1.0 {
		t.Errorf("-o yaml function versions: %v", items)
	}
	r = d.thaw(t, "alias", "set", "app", "canary", "1", "-q")
	wantCode(t, r, 0)
	if strings.TrimSpace(r.stdout) != "app:canary" {
		t.Errorf("alias set -q: %q", r.stdout)
	}
	r = d.thaw(t, "invoke", "app:canary", "--event", `[1]`)
	wantCode(t, r, 0)
	if got := jsonValue(t, "stdout", r.stdout); !reflect.DeepEqual(got, []any{1.0}) {
		t.Errorf("invoke app:canary: %v", got)
	}
	r = d.thaw(t, "-o", "json", "rollback", "app")
	wantCode(t, r, cli.ExitError)
	jsonValue(t, "rollback's error", r.stderr)
}
