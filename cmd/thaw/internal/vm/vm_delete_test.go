package vm

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli/clitest"
)

// vmBusyJSON is a VM serving an invocation.
const vmBusyJSON = `{"id": "vm-busy", "function": "hello", "state": "running", "run_dir": "/r", "accel": "tcg", "memory_mib": 256,
	  "created_at": "2026-01-02T03:04:05Z", "updated_at": "2026-01-02T03:04:05Z",
	  "invocation": {"id": "inv-0123456789ab", "started_at": "2026-01-02T03:04:05Z", "running_ms": 12345, "timeout_ms": 600000}}`

// newDeleteDaemon answers what thaw vm delete asks, as thawd does: vm-busy
// serves an invocation for 400 ms after its delete arrives (a forced
// delete ends it at once).
func newDeleteDaemon(t *testing.T) *clitest.Daemon {
	t.Helper()
	answer := clitest.Answer
	mux := http.NewServeMux()
	mux.Handle("GET /v1/vms/vm-busy", answer(200, vmBusyJSON))
	mux.HandleFunc("DELETE /v1/vms/vm-busy", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("force") != "true" {
			time.Sleep(400 * time.Millisecond)
		}
		w.WriteHeader(204)
	})
	return clitest.NewDaemon(t, mux)
}

// While a delete waits for the VM's invocation, thaw says so on stderr;
// --force asks the daemon to kill the VM and says what that ended.
func TestVMDeleteSaysWhatItWaitsFor(t *testing.T) {
	waitNotice, waitPoll = 50*time.Millisecond, 50*time.Millisecond
	t.Cleanup(func() { waitNotice, waitPoll = time.Second, 2*time.Second })
	f := newDeleteDaemon(t)
	r := f.Run(t, "", NewCommand, "vm", "delete", "vm-busy")
	clitest.WantCode(t, r, 0)
	clitest.WantContains(t, "stdout", r.Stdout, "deleted vm vm-busy")
	clitest.WantContains(t, "stderr", r.Stderr, "thaw: vm vm-busy: waiting for invocation inv-0123456789ab (running 12 s, timeout 600 s); --force kills the VM now")
	if n := strings.Count(r.Stderr, "waiting for"); n != 1 {
		t.Errorf("said %d times what it waits for, want once until it changes", n)
	}
	if f.Asked("DELETE /v1/vms/vm-busy?force=true") {
		t.Error("a plain delete was sent with force")
	}
	r = f.Run(t, "", NewCommand, "vm", "delete", "--force", "vm-busy")
	clitest.WantCode(t, r, 0)
	clitest.WantContains(t, "stderr", r.Stderr, "vm vm-busy was killed during invocation inv-0123456789ab (running 12 s), which failed")
	if !f.Asked("DELETE /v1/vms/vm-busy?force=true") {
		t.Error("--force did not ask the daemon to kill the vm")
	}
}
