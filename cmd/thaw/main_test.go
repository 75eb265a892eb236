package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli/clitest"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// fakeDaemon answers a few API requests the way thawd does and records
// what it was asked.
type fakeDaemon struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string          // "METHOD /path?query"
	bodies   map[string][]byte // request bodies by "METHOD /path"
}

func (f *fakeDaemon) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func (f *fakeDaemon) body(key string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.bodies[key]
}

const (
	functionsJSON = `{"items": [
	  {"name": "hello", "digest": "sha256:0123456789abcdef0123", "code_dir": "/d/hello", "disk": "/d/hello.img",
	   "memory_mib": 512, "vcpus": 1, "created_at": "2025-01-02T03:04:05Z"},
	  {"name": "big", "digest": "sha256:fedcba9876543210fedc", "code_dir": "/d/big", "disk": "/d/big.img",
	   "memory_mib": 2048, "vcpus": 2, "created_at": "2025-01-02T03:04:05Z"}]}`
	notFoundJSON = `{"error":{"code":"not_found","message":"function \"nope\": not found"}}`
	vmsJSON      = `{"items": [
	  {"id": "vm-run", "function": "hello", "state": "running", "pid": 4242, "run_dir": "/r/vm-run",
	   "accel": "kvm", "memory_mib": 512, "boot_ms": 812.34, "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z"},
	  {"id": "vm-bad", "function": "hello", "state": "failed", "run_dir": "/r/vm-bad", "snapshot": "snap-1", "strategy": "file",
	   "reason": "guest agent did not answer within 90s: qemu exited with status 1: could not load the device state from the snapshot",
	   "accel": "kvm", "memory_mib": 512, "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z",
	   "restore": {"verify_ms": 1.25, "vmm_start_ms": 20.5, "load_state_ms": 3.5, "setup_ms": 26.0, "resume_ms": 4.0}}]}`
	restoredJSON = `{"id": "vm-new", "function": "hello", "state": "running", "pid": 77, "snapshot": "snap-1", "strategy": "mmap",
	   "accel": "kvm", "memory_mib": 512, "restore": {"verify_ms": 1.25, "vmm_start_ms": 20.5, "load_state_ms": 3.5, "setup_ms": 26.0, "resume_ms": 4.0}}`
	vmJSON     = `{"id": "vm-run", "function": "hello", "state": "running", "memory_mib": 512, "accel": "kvm"}`
	raisedJSON = `{"id": "inv-1", "function": "hello", "vm": "vm-cold", "mode": "cold", "snapshot": "snap-1", "strategy": "file", "ok": false,
	  "error": {"type": "ValueError", "message": "bad input", "traceback": "Traceback (most recent call last):\n  File \"handler.py\", line 3, in handle\nValueError: bad input\n"},
	  "timing": {"restore": {"verify_ms": 1, "vmm_start_ms": 2, "load_state_ms": 3, "setup_ms": 6.5, "resume_ms": 1.5}, "invoke_ms": 2.25, "guest_ms": 0.5, "total_ms": 10.75, "teardown_ms": 3}}`
	okJSON = `{"id": "inv-2", "function": "ok", "vm": "vm-cold", "mode": "cold", "snapshot": "snap-2", "strategy": "file", "ok": true,
	  "result": {"greeting":"hello","n":[1,2]},
	  "timing": {"restore": {"verify_ms": 1, "vmm_start_ms": 2, "load_state_ms": 3, "setup_ms": 6.5, "resume_ms": 1.5}, "invoke_ms": 2.25, "guest_ms": 0.5, "total_ms": 10.75, "teardown_ms": 3}}`
	warmJSON        = `{"id": "inv-3", "function": "hello", "vm": "vm-run", "mode": "warm", "ok": true, "result": 42, "timing": {"invoke_ms": 1.5, "guest_ms": 0.25, "total_ms": 1.75}}`
	invocationsJSON = `{"items": [
	  {"id": "inv-1", "function": "hello", "vm": "vm-cold", "snapshot": "snap-1", "strategy": "file", "ok": false,
	   "detail": ` + raisedJSON + `, "created_at": "2025-01-02T03:04:05Z"}]}`
	infoJSON = `{"version": "0.1.0", "accel": {"accel": "kvm", "source": "probe", "detail": "/dev/kvm is usable"},
	  "vmm": {"name": "qemu", "version": "8.2.2", "machine": "pc-q35-8.2"}, "image": {"dir": "/img", "hash": "abc123", "kernel_version": "6.6.1"},
	  "data_dir": "/var/lib/thaw", "strategies": ["file", "mmap"]}`
)

const (
	copiedJSON = `{"id": "snap-2", "function": "hello", "dir": "/d/snap-2",
	  "memory_mib": 256, "size_bytes": 268435456, "disk_bytes": 104857600, "create_ms": 812.5, "created_at": "2025-01-02T03:04:05Z"}`
	storedJSON = `{"snapshot": "snap-1", "path": "/mnt/huge/snap-1.mem", "size": 268435456, "sha256": "00", "bytes": 104857600,
	   "regions": 6, "stored_ms": 380, "stored_at": "2025-01-02T03:04:05Z"}`
)

// The fake daemon's operations: each is polled through its phases (one a
// GET) to its end; op-slow never ends.
var fakeOps = map[string]struct {
	kind, target string
	phases       []string // progress JSON, one per poll while running
	result       string   // result or error JSON
}{
	"op-boot":  {"boot", "hello", []string{`{"phase": "starting vmm"}`, `{"phase": "booting"}`}, `"result": {"vm": ` + vmJSON + `}`},
	"op-copy":  {"copy", "snap-1", []string{`{"phase": "copying", "done": 1048576, "total": 104857600, "unit": "bytes"}`}, `"result": {"snapshot": ` + copiedJSON + `}`},
	"op-store": {"store", "snap-1", []string{`{"phase": "copying to the store"}`}, `"result": {"store": ` + storedJSON + `}`},
	"op-prep": {"prepare", "hello", []string{`{"phase": "record faasnap", "done": 0, "total": 3, "unit": "strategies"}`},
		`"result": {"prepare": {"function": "hello", "clean_snapshot": ` + copiedJSON + `, "timing": {"total_ms": 4971}}}`},
	"op-fail": {"prepare", "broken", []string{`{"phase": "boot: booting"}`},
		`"error": {"status": 502, "code": "vm_failed", "message": "vm vm-1: guest agent not ready", "request_id": "req-1"}`},
	"op-slow": {"boot", "hello", []string{`{"phase": "booting"}`}, ""},
}

// opJSON is fake operation id after polls GETs.
func opJSON(id, state string, polls int) string {
	op := fakeOps[id]
	progress := op.phases[min(polls, len(op.phases)-1)]
	end := ""
	if state != "running" {
		progress, end = `{"phase": "done"}`, ", "+op.result
		if strings.HasPrefix(op.result, `"error"`) {
			progress = op.phases[len(op.phases)-1]
		}
	}
	return fmt.Sprintf(`{"id": %q, "kind": %q, "target": %q, "state": %q, "progress": %s%s,
	  "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z"}`, id, op.kind, op.target, state, progress, end)
}

// asyncAnswer answers ?wait=false with operation id (202), else as sync does.
func asyncAnswer(sync http.Handler, id string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") != "false" {
			sync.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/operations/"+id)
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, opJSON(id, "running", 0))
	})
}

// operation serves GET /v1/operations/{id}: running through its phases,
// then ended.
func (f *fakeDaemon) operation() http.HandlerFunc {
	polls := map[string]int{}
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		op, ok := fakeOps[id]
		w.Header().Set("Content-Type", "application/json")
		if !ok {
			w.WriteHeader(404)
			io.WriteString(w, `{"error":{"code":"not_found","message":"operation `+id+`: not found"}}`)
			return
		}
		f.mu.Lock()
		n := polls[id]
		polls[id]++
		f.mu.Unlock()
		state := "running"
		switch {
		case op.result == "" || n < len(op.phases):
		case strings.HasPrefix(op.result, `"error"`):
			state = "failed"
		default:
			state = "succeeded"
		}
		io.WriteString(w, opJSON(id, state, n))
	}
}

func newFakeDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{bodies: map[string][]byte{}}
	answer := clitest.Answer
	mux := http.NewServeMux()
	mux.Handle("GET /v1/info", answer(200, infoJSON))
	mux.Handle("GET /v1/functions", answer(200, functionsJSON))
	mux.Handle("GET /v1/functions/nope", answer(404, notFoundJSON))
	mux.Handle("POST /v1/functions/hello/invoke", answer(200, raisedJSON))
	mux.Handle("POST /v1/functions/ok/invoke", answer(200, okJSON))
	mux.Handle("GET /v1/vms", answer(200, vmsJSON))
	mux.Handle("GET /v1/vms/vm-run", answer(200, vmJSON))
	mux.Handle("POST /v1/vms/vm-run/invoke", answer(200, warmJSON))
	mux.Handle("DELETE /v1/vms/vm-run", answer(204, ""))
	mux.Handle("DELETE /v1/vms/vm-gone", answer(404, `{"error":{"code":"not_found","message":"vm \"vm-gone\": not found"}}`))
	mux.Handle("GET /v1/invocations", answer(200, invocationsJSON))
	mux.Handle("POST /v1/vms", asyncAnswer(answer(201, restoredJSON), "op-boot"))
	mux.Handle("POST /v1/snapshots/snap-1/copy", asyncAnswer(answer(201, copiedJSON), "op-copy"))
	mux.Handle("PUT /v1/snapshots/snap-1/store", asyncAnswer(answer(200, storedJSON), "op-store"))
	mux.Handle("POST /v1/functions/hello/prepare", asyncAnswer(answer(201, `{}`), "op-prep"))
	mux.Handle("POST /v1/functions/broken/prepare", asyncAnswer(answer(502, `{}`), "op-fail"))
	mux.Handle("GET /v1/operations", answer(200, `{"items": [`+opJSON("op-boot", "succeeded", 0)+`, `+opJSON("op-copy", "running", 0)+`]}`))
	mux.Handle("GET /v1/operations/{id}", f.operation())
	mux.Handle("POST /v1/snapshots/nope/copy", answer(404, `{"error":{"code":"not_found","message":"snapshot \"nope\": not found"}}`))
	mux.Handle("GET /v1/store", answer(200, `{"available": true, "dir": "/mnt/huge", "kind": "hugetlbfs", "page_size": 2097152,
	  "capacity_bytes": 8589934592, "free_bytes": 4294967296, "used_bytes": 104857600, "reserved_bytes": 96468992,
	  "entries": [{"snapshot": "snap-1", "path": "/mnt/huge/snap-1.mem", "size": 268435456, "sha256": "00", "bytes": 104857600,
	   "regions": 6, "page_size": 2097152, "stored_ms": 380, "stored_at": "2025-01-02T03:04:05Z"}]}`))
	return f.serve(t, mux)
}

// serve starts f's server over h, recording each request and its body;
// it is closed when the test ends.
func (f *fakeDaemon) serve(t *testing.T, h http.Handler) *fakeDaemon {
	t.Helper()
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		f.bodies[r.Method+" "+r.URL.Path] = b
		f.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

type result struct {
	code           int
	stdout, stderr string
}

// thaw runs the command line against the fake daemon.
func (f *fakeDaemon) thaw(t *testing.T, args ...string) result {
	t.Helper()
	return f.thawStdin(t, "", args...)
}

func (f *fakeDaemon) thawStdin(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	args = append([]string{"--url", f.URL}, args...)
	code := execute(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	t.Logf("thaw %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return result{code, out.String(), errb.String()}
}

func wantCode(t *testing.T, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit code %d, want %d (stderr: %q)", r.code, code, r.stderr)
	}
}

// wantFailure wants thaw to have exited with code and said each of subs
// on stderr.
func wantFailure(t *testing.T, r result, code int, subs ...string) {
	t.Helper()
	wantCode(t, r, code)
	wantContains(t, "stderr", r.stderr, subs...)
}

// tableLines runs thaw with args, which must succeed and print a table of
// a header and rows rows, and returns its lines.
func tableLines(t *testing.T, f *fakeDaemon, rows int, args ...string) []string {
	t.Helper()
	r := f.thaw(t, args...)
	wantCode(t, r, 0)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != rows+1 {
		t.Fatalf("want a header and %d rows, got %d lines", rows, len(lines))
	}
	return lines
}

func wantContains(t *testing.T, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}

func TestFunctionListTable(t *testing.T) {
	f := newFakeDaemon(t)
	lines := tableLines(t, f, 2, "function", "list")
	for _, col := range []string{"NAME", "MEMORY", "VCPUS", "DIGEST", "CREATED"} {
		wantContains(t, "header", lines[0], col)
	}
	wantContains(t, "row", lines[1], "hello", "512 MiB", "0123456789ab")
	wantContains(t, "row", lines[2], "big", "2 GiB")
	// Columns are aligned: "MEMORY" starts where "512 MiB" does.
	if strings.Index(lines[0], "MEMORY") != strings.Index(lines[1], "512 MiB") {
		t.Errorf("columns not aligned:\n%s\n%s", lines[0], lines[1])
	}

	// The alias works too.
	r := f.thaw(t, "fn", "ls")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "NAME", "hello")
}

func TestJSONOutputParses(t *testing.T) {
	f := newFakeDaemon(t)
	for _, args := range [][]string{
		{"--json", "function", "list"},
		{"--json", "vm", "list"},
		{"--json", "info"},
		{"--json", "invocations"},
		{"--json", "invoke", "ok"},
	} {
		r := f.thaw(t, args...)
		wantCode(t, r, 0)
		var v map[string]any
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
			t.Fatalf("%v: output is not JSON: %v\n%s", args, err, r.stdout)
		}
	}
	r := f.thaw(t, "--json", "function", "list")
	var list struct {
		Items []struct {
			Name      string `json:"name"`
			MemoryMiB int    `json:"memory_mib"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 2 || list.Items[0].Name != "hello" || list.Items[1].MemoryMiB != 2048 {
		t.Errorf("unexpected list: %+v", list)
	}
}

func TestNotFoundIsError(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "function", "get", "nope")
	wantCode(t, r, 1)
	if want := "thaw: function \"nope\": not found\n"; r.stderr != want {
		t.Errorf("stderr %q, want %q", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
}

func TestUnreachableHint(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	var out, errb bytes.Buffer
	code := run([]string{"--url", url, "vm", "list"}, &out, &errb)
	if code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	wantContains(t, "stderr", errb.String(), "thaw: daemon is unreachable", "is thawd running? start it with 'thawd' or set THAW_URL")
}

func TestInvokeFunctionRaised(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "invoke", "hello", "--event", `{"x": 1}`)
	wantCode(t, r, 3)
	wantContains(t, "stderr", r.stderr,
		"thaw: function hello raised ValueError: bad input",
		"Traceback (most recent call last):",
		`File "handler.py", line 3, in handle`)
	// Nothing on stdout; the timing goes to stderr.
	if r.stdout != "" {
		t.Errorf("stdout %q, want nothing", r.stdout)
	}
	wantContains(t, "stderr", r.stderr, "restore setup", "load state", "invoke", "total", "10.8 ms", "teardown")
	if got := string(f.body("POST /v1/functions/hello/invoke")); !strings.Contains(got, `"event":{"x":1}`) {
		t.Errorf("request body %s does not carry the event", got)
	}

	// --json prints the invocation and still exits with 3.
	r = f.thaw(t, "--json", "invoke", "hello")
	wantCode(t, r, 3)
	var inv struct {
		OK    bool `json:"ok"`
		Error struct {
			Traceback string `json:"traceback"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &inv); err != nil {
		t.Fatalf("--json output is not JSON: %v", err)
	}
	if inv.OK || !strings.Contains(inv.Error.Traceback, "ValueError") {
		t.Errorf("unexpected invocation: %+v", inv)
	}
}

func TestInvokeOK(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "invoke", "ok", "--snapshot", "snap-2", "--strategy", "file", "--timeout-ms", "1500")
	wantCode(t, r, 0)
	// stdout is the result, exactly; the timing is on stderr.
	if want := "{\n  \"greeting\": \"hello\",\n  \"n\": [\n    1,\n    2\n  ]\n}\n"; r.stdout != want {
		t.Errorf("stdout %q, want %q", r.stdout, want)
	}
	wantContains(t, "stderr", r.stderr, "inv-2", "cold", "restore setup", "6.5 ms", "guest", "0.5 ms", "total", "10.8 ms")
	var body map[string]any
	if err := json.Unmarshal(f.body("POST /v1/functions/ok/invoke"), &body); err != nil {
		t.Fatal(err)
	}
	if body["snapshot"] != "snap-2" || body["strategy"] != "file" || body["timeout_ms"] != 1500.0 {
		t.Errorf("request body %v", body)
	}
	if ev, _ := json.Marshal(body["event"]); string(ev) != "{}" {
		t.Errorf("default event %s, want {}", ev)
	}
}

func TestInvokeWarm(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "invoke", "hello", "--vm", "vm-run")
	wantCode(t, r, 0)
	if r.stdout != "42\n" {
		t.Errorf("stdout %q, want the result 42", r.stdout)
	}
	wantContains(t, "stderr", r.stderr, "warm", "invoke", "1.5 ms")
	if strings.Contains(r.stderr, "restore") {
		t.Errorf("a warm invocation shows restore timing:\n%s", r.stderr)
	}

	// The VM must run the named function.
	r = f.thaw(t, "invoke", "other", "--vm", "vm-run")
	wantFailure(t, r, 1, `runs function "hello", not "other"`)
}

func TestInvokeEventFromStdin(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thawStdin(t, " {\"n\": 3}\n", "invoke", "ok", "--event-file", "-")
	wantCode(t, r, 0)
	if got := string(f.body("POST /v1/functions/ok/invoke")); !strings.Contains(got, `"event":{"n":3}`) {
		t.Errorf("request body %s does not carry the event", got)
	}
}

func TestInvokeInvalidEventMakesNoRequest(t *testing.T) {
	f := newFakeDaemon(t)
	for _, args := range [][]string{
		{"invoke", "ok", "--event", `{"x": `},
		{"invoke", "ok", "--event", `not json`},
		{"invoke", "ok", "--event", ``},
	} {
		r := f.thaw(t, args...)
		wantFailure(t, r, 2, "--event is")
	}
	r := f.thawStdin(t, "{oops}", "invoke", "ok", "--event-file", "-")
	wantFailure(t, r, 2, "not valid JSON")
	if n := f.count(); n != 0 {
		t.Errorf("%d requests made, want none", n)
	}
}

func TestInvokeUsageErrors(t *testing.T) {
	f := newFakeDaemon(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"invoke", "hello", "--vm", "vm-run", "--strategy", "file"}, "--strategy"},
		{[]string{"invoke", "hello", "--vm", "vm-run", "--snapshot", "snap-1"}, "--snapshot"},
		{[]string{"invoke", "hello", "--event", "{}", "--event-file", "x.json"}, "not both"},
		{[]string{"invoke"}, "FUNCTION"},
		{[]string{"invoke", "hello", "--timeout-ms", "-1"}, "--timeout-ms"},
	} {
		r := f.thaw(t, tc.args...)
		wantFailure(t, r, 2, tc.msg, "Run 'thaw invoke --help' for usage.")
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d requests made, want none", n)
	}
}

func TestUsageErrors(t *testing.T) {
	f := newFakeDaemon(t)
	for _, args := range [][]string{
		{"bogus"},
		{"vm", "bogus"},
		{"vm", "list", "extra"},
		{"--no-such-flag", "info"},
		{"function", "create", "x"}, // --dir is required
		{"vm", "delete"},
		{"--timeout", "0s", "info"},
		{"bench", "remote-disk", "/mnt"}, // --backing is required
		{"bench", "remote-disk", "/mnt", "--backing", "/x", "--latency", "2s"},           // latency over 1 s
		{"bench", "remote-disk", "/mnt", "--backing", "/x", "--iops", "-1"},              // negative cap
		{"bench", "eval", "--storage", "/nonexistent-storage-description", "--estimate"}, // no storage.json
	} {
		r := f.thaw(t, args...)
		wantFailure(t, r, 2, "thaw: ", "--help")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--url", "ftp://x", "info"}, &out, &errb); code != 2 {
		t.Errorf("bad --url: exit code %d, want 2", code)
	}
	if n := f.count(); n != 0 {
		t.Errorf("%d requests made, want none", n)
	}
}

func TestHelp(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "--help")
	wantCode(t, r, 0)
	wantContains(t, "help", r.stdout, "Exit codes:", "3    the function ran but raised", "130  interrupted", "function", "snapshot", "invoke")
	r = f.thaw(t, "invoke", "--help")
	wantCode(t, r, 0)
	wantContains(t, "help", r.stdout, "--event-file", "Examples:")
}

func TestVMListShowsFailureReason(t *testing.T) {
	lines := tableLines(t, newFakeDaemon(t), 2, "vm", "list", "--state", "all")
	wantContains(t, "header", lines[0], "ID", "FUNCTION", "STATE", "MEMORY", "STARTUP", "REASON")
	wantContains(t, "running row", lines[1], "vm-run", "running", "4242", "boot", "812.3 ms")
	wantContains(t, "failed row", lines[2], "vm-bad", "failed", "snap-1", "30.0 ms", "guest agent did not answer", "…")
	if strings.Contains(lines[2], "device state") {
		t.Errorf("reason not truncated: %s", lines[2])
	}
}

func TestVMDeleteGoesOn(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "vm", "delete", "vm-gone", "vm-run")
	wantCode(t, r, 1)
	wantContains(t, "stdout", r.stdout, "deleted vm vm-run")
	wantContains(t, "stderr", r.stderr, `thaw: vm "vm-gone": not found`, "1 of 2 vms not deleted")
}

func TestInfoAndInvocations(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "info")
	wantCode(t, r, 0)
	wantContains(t, "info", r.stdout, "thawd 0.1.0", "kvm (probe: /dev/kvm is usable)", "VMM:", "qemu 8.2.2 (pc-q35-8.2)", "abc123", "6.6.1",
		"/var/lib/thaw", "file, mmap")

	r = f.thaw(t, "invocations", "--function", "hello", "--limit", "5")
	wantCode(t, r, 0)
	wantContains(t, "invocations", r.stdout, "ID", "OK", "TOTAL", "ERROR", "inv-1", "ValueError", "10.8 ms", "cold")
	f.mu.Lock()
	last := f.requests[len(f.requests)-1]
	f.mu.Unlock()
	if last != "GET /v1/invocations?function=hello&limit=5" {
		t.Errorf("request %q", last)
	}
}

func TestVersion(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "version")
	wantCode(t, r, 0)
	wantContains(t, "version", r.stdout, "thaw  dev (go", "thawd 0.1.0 at")
	// An unreachable daemon is reported, not an error.
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	var out, errb bytes.Buffer
	if code := run([]string{"--url", url, "version"}, &out, &errb); code != 0 {
		t.Fatalf("exit code %d: %s", code, errb.String())
	}
	wantContains(t, "version", out.String(), "thaw  dev", "not reachable")
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 129394278: "123.4 MiB", 3 << 30: "3.0 GiB"} {
		if got := output.FmtBytes(n); got != want {
			t.Errorf("fmtBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for mib, want := range map[int]string{0: "-", 512: "512 MiB", 1024: "1 GiB", 1536: "1.5 GiB"} {
		if got := output.FmtMiB(mib); got != want {
			t.Errorf("fmtMiB(%d) = %q, want %q", mib, got, want)
		}
	}
	defer func(f func() time.Time) { output.Now = f }(output.Now)
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	output.Now = func() time.Time { return t0 }
	for d, want := range map[time.Duration]string{5 * time.Second: "5s ago", 3 * time.Minute: "3m ago", 5 * time.Hour: "5h ago", 50 * time.Hour: "2d ago"} {
		if got := output.FmtAge(t0.Add(-d)); got != want {
			t.Errorf("fmtAge(-%s) = %q, want %q", d, got, want)
		}
	}
	if got := output.Truncate("a  b\nc", 60); got != "a b c" {
		t.Errorf("truncate = %q", got)
	}
	if got := output.Truncate(strings.Repeat("x", 70), 60); len([]rune(got)) != 60 {
		t.Errorf("truncate to %d runes", len([]rune(got)))
	}
}

func TestURLFromEnvironment(t *testing.T) {
	f := newFakeDaemon(t)
	t.Setenv("THAW_URL", f.URL)
	var out, errb bytes.Buffer
	if code := run([]string{"function", "list"}, &out, &errb); code != 0 {
		t.Fatalf("exit code %d: %s", code, errb.String())
	}
	wantContains(t, "stdout", out.String(), "hello", "big")
}

func TestVMRestoreShowsTiming(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "vm", "restore", "snap-1", "--strategy", "mmap")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "vm-new", "snap-1", "mmap", "Restore:", "verify", "1.2 ms", "vmm start", "20.5 ms",
		"load state", "3.5 ms", "restore setup", "26.0 ms", "restore resume", "4.0 ms", "ready", "30.0 ms")
	var body map[string]string
	if err := json.Unmarshal(f.body("POST /v1/vms"), &body); err != nil {
		t.Fatal(err)
	}
	if body["snapshot"] != "snap-1" || body["strategy"] != "mmap" {
		t.Errorf("request body %v", body)
	}
}

func TestSnapshotCopy(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "snapshot", "copy", "snap-1")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "copied snap-1 to snap-2", "hello", "256 MiB")
	r = f.thaw(t, "snapshot", "copy", "nope")
	wantFailure(t, r, 1, "not found")
	r = f.thaw(t, "snapshot", "copy")
	wantCode(t, r, 2)
}

func TestStoreHugeTLBFS(t *testing.T) {
	f := newFakeDaemon(t)
	r := f.thaw(t, "snapshot", "store")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "hugetlbfs (2.0 MiB pages)", "8.0 GiB", "Reserved by clones:", "92.0 MiB", "snap-1", "100.0 MiB")
}

// TestTokenHints: a 401 says where the token comes from, or that the one
// sent was refused; the token from THAW_TOKEN is what is sent.
func TestTokenHints(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		sent = append(sent, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("WWW-Authenticate", `Bearer realm="thaw"`)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		io.WriteString(w, `{"error":{"code":"unauthenticated","message":"an API token is required over TCP: send Authorization: Bearer TOKEN"}}`)
	}))
	defer srv.Close()
	t.Setenv("THAW_TOKEN_FILE", "")

	t.Setenv("THAW_TOKEN", "")
	// Without THAW_TOKEN(_FILE) the client reads the default token file if
	// this host has a readable one.
	wantFirst := ""
	if b, err := os.ReadFile(client.DefaultTokenFile); err == nil && strings.TrimSpace(string(b)) != "" {
		wantFirst = "Bearer " + strings.TrimSpace(string(b))
	}
	var out, errb bytes.Buffer
	if code := run([]string{"--url", srv.URL, "info"}, &out, &errb); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	if wantFirst == "" {
		wantContains(t, "stderr", errb.String(), "an API token is required", "set THAW_TOKEN", "THAW_TOKEN_FILE",
			client.DefaultTokenFile, "--url "+client.DefaultURL)
	} else {
		wantContains(t, "stderr", errb.String(), "refused this API token")
	}

	t.Setenv("THAW_TOKEN", "not-the-token")
	errb.Reset()
	if code := run([]string{"--url", srv.URL, "info"}, &out, &errb); code != 1 {
		t.Fatalf("exit code %d, want 1", code)
	}
	wantContains(t, "stderr", errb.String(), "refused this API token", "<data-dir>/token")
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 2 || sent[0] != wantFirst || sent[1] != "Bearer not-the-token" {
		t.Errorf("Authorization sent: %q", sent)
	}
}

// TestSocketPermissionHint: a socket this user may not open says so (the
// error as the client wraps a refused connect; root is never refused).
func TestSocketPermissionHint(t *testing.T) {
	var errb bytes.Buffer
	a := &cli.App{Stderr: &errb}
	a.PrintError(fmt.Errorf("%w at unix:/run/thaw/thawd.sock: %w", client.ErrUnreachable, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}))
	wantContains(t, "stderr", errb.String(), "may not use thawd's socket", "--socket-group")
}

// run runs thaw with args (without the program name) and returns the exit
// code. Tests call it with their own writers.
func run(args []string, stdout, stderr io.Writer) int {
	return execute(context.Background(), args, os.Stdin, stdout, stderr)
}
