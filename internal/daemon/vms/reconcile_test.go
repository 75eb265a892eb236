package vms

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/procstat"
)

// leftover starts a process standing in for a VMM of VM vm a dead daemon
// left: its command line names it as QEMU's does ("-name thaw-<id>").
func leftover(t *testing.T, vm string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-name", "thaw-"+vm)
	cmd.Env = append(os.Environ(), helperEnv+"=sleep")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// At start, VMs a dead daemon left recorded live are failed and their run
// directories removed: a process still running as one of them is killed,
// and a process that only has a recorded pid (recycled) is left alone.
func TestReconcileAdoptsLeftovers(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	alive, recycled, gone, stopped := newID(), newID(), newID(), newID()
	qemu := leftover(t, alive)
	other := leftover(t, newID()) // another VM's: its pid recorded for recycled
	dead := leftover(t, gone)
	_ = dead.Process.Kill()
	_ = dead.Wait()
	pids := map[string]int{alive: qemu.Process.Pid, recycled: other.Process.Pid, gone: dead.Process.Pid}
	for _, id := range []string{alive, recycled, gone, stopped} {
		dir := filepath.Join(f.m.cfg.RunDir, id)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		v := &catalog.VM{ID: id, Function: "echo", State: catalog.StateRunning, PID: pids[id], RunDir: dir}
		if id == stopped {
			v.State = catalog.StateStopped
		}
		if err := f.db.PutVM(ctx, v); err != nil {
			t.Fatal(err)
		}
	}
	exited := make(chan struct{})
	go func() { _ = qemu.Wait(); close(exited) }()
	if err := f.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	<-exited
	if procstat.Exited(other.Process.Pid) {
		t.Error("a process whose pid a vm had recorded, not running as it, was killed")
	}
	want := map[string]string{
		alive:    "daemon restarted; the VM could not be re-adopted and was killed",
		recycled: "qemu process gone when the daemon restarted",
		gone:     "qemu process gone when the daemon restarted",
	}
	for id, reason := range want {
		v := f.record(t, id)
		if v.State != catalog.StateFailed || v.Reason != reason || v.PID != 0 {
			t.Errorf("vm %s: %s %q pid %d, want failed %q", id, v.State, v.Reason, v.PID, reason)
		}
		if _, err := os.Stat(v.RunDir); !os.IsNotExist(err) {
			t.Errorf("vm %s: run dir %v", id, err)
		}
	}
	if v := f.record(t, stopped); v.State != catalog.StateStopped {
		t.Errorf("a stopped vm became %s", v.State)
	}
	if _, err := os.Stat(filepath.Join(f.m.cfg.RunDir, stopped)); err != nil {
		t.Errorf("a stopped vm's directory: %v", err)
	}
}
