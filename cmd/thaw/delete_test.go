package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// newDeleteDaemon answers what the delete commands ask, as thawd does,
// and records the requests: vm-busy serves an invocation for 400 ms after
// its delete arrives (a forced delete ends it at once), function hello
// has a VM, two snapshots (one pinned), a version and an alias.
func newDeleteDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{bodies: map[string][]byte{}}
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			io.WriteString(w, body)
		}
	}
	busy := `{"id": "vm-busy", "function": "hello", "state": "running", "run_dir": "/r", "accel": "tcg", "memory_mib": 256,
	  "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z",
	  "invocation": {"id": "inv-0123456789ab", "started_at": "2026-01-02T03:04:05Z", "running_ms": 12345, "timeout_ms": 600000}}`
	mux := http.NewServeMux()
	mux.Handle("GET /v1/vms/vm-busy", answer(200, busy))
	mux.HandleFunc("DELETE /v1/vms/vm-busy", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("force") != "true" {
			time.Sleep(400 * time.Millisecond)
		}
		w.WriteHeader(204)
	})
	mux.Handle("GET /v1/functions/hello", answer(200, `{"name": "hello", "digest": "ab", "code_dir": "/c", "disk": "/d", "memory_mib": 256,
	  "vcpus": 1, "network": {"egress": "none"}, "created_at": "2026-01-02T03:04:05Z"}`))
	mux.Handle("GET /v1/vms", answer(200, `{"items": [`+busy+`]}`))
	mux.Handle("GET /v1/snapshots", answer(200, `{"items": [{"id": "snap-1", "function": "hello", "pinned": true}, {"id": "snap-2", "function": "hello", "version": 1}]}`))
	mux.Handle("GET /v1/functions/hello/versions", answer(200, `{"items": [{"function": "hello", "version": 1}]}`))
	mux.Handle("GET /v1/functions/hello/aliases", answer(200, `{"items": [{"function": "hello", "name": "live"}]}`))
	mux.Handle("DELETE /v1/functions/hello", answer(200, `{"function": "hello", "ms": 812.5, "code_dirs": 2,
	  "vms": [{"id": "vm-busy", "state": "running", "invocation": "inv-0123456789ab"}, {"id": "vm-idle", "state": "running", "kept": true}],
	  "snapshots": [{"id": "snap-1", "pinned": true, "stored": true}, {"id": "snap-2", "version": 1}],
	  "versions": [1], "aliases": ["live"]}`))
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.requests = append(f.requests, r.Method+" "+r.URL.RequestURI())
		f.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeDaemon) asked(req string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.requests {
		if r == req {
			return true
		}
	}
	return false
}

// While a delete waits for the VM's invocation, thaw says so on stderr;
// --force asks the daemon to kill the VM and says what that ended.
func TestVMDeleteSaysWhatItWaitsFor(t *testing.T) {
	waitNotice, waitPoll = 50*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { waitNotice, waitPoll = time.Second, 2*time.Second })
	f := newDeleteDaemon(t)
	r := f.thaw(t, "vm", "delete", "vm-busy")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "deleted vm vm-busy")
	wantContains(t, "stderr", r.stderr, "thaw: vm vm-busy: waiting for invocation inv-0123456789ab (running 12 s, timeout 600 s); --force kills the VM now")
	if n := strings.Count(r.stderr, "waiting for"); n != 1 {
		t.Errorf("said %d times what it waits for, want once until it changes", n)
	}
	if f.asked("DELETE /v1/vms/vm-busy?force=true") {
		t.Error("a plain delete was sent with force")
	}
	r = f.thaw(t, "vm", "delete", "--force", "vm-busy")
	wantCode(t, r, 0)
	wantContains(t, "stderr", r.stderr, "vm vm-busy was killed during invocation inv-0123456789ab (running 12 s), which failed")
	if !f.asked("DELETE /v1/vms/vm-busy?force=true") {
		t.Error("--force did not ask the daemon to kill the vm")
	}
}

// --cascade asks first on a terminal, and without one needs --yes: a
// usage error before any request otherwise.
func TestFunctionDeleteCascadeConfirms(t *testing.T) {
	f := newDeleteDaemon(t)
	r := f.thaw(t, "function", "delete", "hello", "--cascade")
	wantCode(t, r, ExitUsage)
	wantContains(t, "stderr", r.stderr, "--yes", "not a terminal")
	if n := f.count(); n != 0 {
		t.Fatalf("%d requests without confirmation, want none", n)
	}

	isTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { isTerminal = stdinTerminal })
	r = f.thawStdin(t, "n\n", "function", "delete", "hello", "--cascade")
	wantCode(t, r, ExitError)
	wantContains(t, "stderr", r.stderr, "Function hello has", "1 VM: vm-busy (running)", "2 snapshots: snap-1 (pinned), snap-2",
		"1 version: 1 and 1 alias", "Delete it with all of that? [y/N]", "function hello not deleted")
	if f.asked("DELETE /v1/functions/hello?cascade=true") {
		t.Fatal("deleted although the answer was no")
	}
	r = f.thawStdin(t, "yes\n", "function", "delete", "hello", "--cascade")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "deleted function hello", "VMs:", "2: vm-busy (running, killed during invocation inv-0123456789ab), vm-idle (kept idle)",
		"Snapshots:", "2: snap-1 (pinned, with its memory store copy), snap-2 (version 1)", "Versions:", "1: 1", "Aliases:", "1: live", "2 copies removed")
	if !f.asked("DELETE /v1/functions/hello?cascade=true") {
		t.Fatal("the confirmed cascade was not sent")
	}

	// --yes needs no terminal and asks nothing; --json prints the document.
	isTerminal = func(io.Reader) bool { return false }
	r = f.thaw(t, "--json", "function", "delete", "hello", "--cascade", "--yes")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, `"function": "hello"`, `"kept": true`, `"code_dirs": 2`)
	if strings.Contains(r.stderr, "[y/N]") {
		t.Error("--yes asked anyway")
	}
	// Without --cascade, nothing is asked and no cascade is sent.
	r = f.thaw(t, "function", "delete", "hello")
	wantCode(t, r, 0)
	if !f.asked("DELETE /v1/functions/hello") {
		t.Error("plain delete not sent")
	}
}
