package vms

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/procstat"
)

// Reconcile marks VMs whose processes are gone as failed and cleans their
// run directories. A VM process that is somehow still alive is killed: this
// daemon holds no QMP or agent connection to it, so it cannot be trusted.
func (m *Manager) Reconcile(ctx context.Context) error {
	vms, err := m.d.Catalog.ListVMs(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: %w", err)
	}
	for _, v := range vms {
		if !v.Live() {
			continue
		}
		reason := "qemu process gone when the daemon restarted"
		if v.PID > 0 && processMatches(v.PID, v.ID) {
			_ = syscall.Kill(v.PID, syscall.SIGKILL)
			reason = "daemon restarted; the VM could not be re-adopted and was killed"
		}
		if v.PID > 0 {
			waitGone(v.PID, 5*time.Second) // it may map a range of a device store
		}
		m.removeVMLink(v.ID)
		v.State, v.Reason, v.PID = catalog.StateFailed, reason, 0
		_ = os.RemoveAll(v.RunDir)
		if err := m.d.Catalog.PutVM(ctx, v); err != nil {
			return fmt.Errorf("reconcile vm %s: %w", v.ID, err)
		}
		m.d.Log.Warn("reconciled vm", "vm", v.ID, "reason", reason)
	}
	return nil
}

// waitGone waits until pid has exited (or is a zombie), at most d.
func waitGone(pid int, d time.Duration) {
	deadline := time.Now().Add(d)
	for !procstat.Exited(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}

// processMatches reports whether pid is a live QEMU of VM vmID (its
// command line names it "thaw-<id>"), so a recycled pid is never killed by
// mistake.
func processMatches(pid int, vmID string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return vmID != "" && bytes.Contains(b, []byte("\x00-name\x00thaw-"+vmID+"\x00"))
}
