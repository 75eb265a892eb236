package function

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli/clitest"
)

// newDeleteDaemon answers what thaw function delete asks, as thawd does:
// function hello has a VM serving an invocation, two snapshots (one
// pinned), a version and an alias.
func newDeleteDaemon(t *testing.T) *clitest.Daemon {
	t.Helper()
	answer := clitest.Answer
	busy := `{"id": "vm-busy", "function": "hello", "state": "running", "run_dir": "/r", "accel": "tcg", "memory_mib": 256,
	  "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z",
	  "invocation": {"id": "inv-0123456789ab", "started_at": "2026-01-02T03:04:05Z", "running_ms": 12345, "timeout_ms": 600000}}`
	mux := http.NewServeMux()
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
	return clitest.NewDaemon(t, mux)
}

// newFunctionCmd is the function command as thaw has it, without the
// deploy package's "function versions".
func newFunctionCmd(a *cli.App) *cobra.Command { return NewCommand(a) }

// --cascade asks first on a terminal, and without one needs --yes: a
// usage error before any request otherwise.
func TestFunctionDeleteCascadeConfirms(t *testing.T) {
	f := newDeleteDaemon(t)
	r := f.Run(t, "", newFunctionCmd, "function", "delete", "hello", "--cascade")
	clitest.WantCode(t, r, cli.ExitUsage)
	clitest.WantContains(t, "stderr", r.Stderr, "--yes", "not a terminal")
	if n := f.Count(); n != 0 {
		t.Fatalf("%d requests without confirmation, want none", n)
	}

	isTerminal = func(io.Reader) bool { return true }
	t.Cleanup(func() { isTerminal = stdinTerminal })
	r = f.Run(t, "n\n", newFunctionCmd, "function", "delete", "hello", "--cascade")
	clitest.WantCode(t, r, cli.ExitError)
	clitest.WantContains(t, "stderr", r.Stderr, "Function hello has", "1 VM: vm-busy (running)", "2 snapshots: snap-1 (pinned), snap-2",
		"1 version: 1 and 1 alias", "Delete it with all of that? [y/N]", "function hello not deleted")
	if f.Asked("DELETE /v1/functions/hello?cascade=true") {
		t.Fatal("deleted although the answer was no")
	}
	r = f.Run(t, "yes\n", newFunctionCmd, "function", "delete", "hello", "--cascade")
	clitest.WantCode(t, r, 0)
	clitest.WantContains(t, "stdout", r.Stdout, "deleted function hello", "VMs:", "2: vm-busy (running, killed during invocation inv-0123456789ab), vm-idle (kept idle)",
		"Snapshots:", "2: snap-1 (pinned, with its memory store copy), snap-2 (version 1)", "Versions:", "1: 1", "Aliases:", "1: live", "2 copies removed")
	if !f.Asked("DELETE /v1/functions/hello?cascade=true") {
		t.Fatal("the confirmed cascade was not sent")
	}

	// --yes needs no terminal and asks nothing; --json prints the document.
	isTerminal = func(io.Reader) bool { return false }
	r = f.Run(t, "", newFunctionCmd, "--json", "function", "delete", "hello", "--cascade", "--yes")
	clitest.WantCode(t, r, 0)
	clitest.WantContains(t, "stdout", r.Stdout, `"function": "hello"`, `"kept": true`, `"code_dirs": 2`)
	if strings.Contains(r.Stderr, "[y/N]") {
		t.Error("--yes asked anyway")
	}
	// Without --cascade, nothing is asked and no cascade is sent.
	r = f.Run(t, "", newFunctionCmd, "function", "delete", "hello")
	clitest.WantCode(t, r, 0)
	if !f.Asked("DELETE /v1/functions/hello") {
		t.Error("plain delete not sent")
	}
}
