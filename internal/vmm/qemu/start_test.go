package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/vmend"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// realSpec is a spec for a real QEMU on the guest image of THAW_IMAGE
// (skipped without it, as the end-to-end tests are), with the interposer
// make build leaves in bin/.
func realSpec(t *testing.T, id string) vmm.Spec {
	t.Helper()
	img := os.Getenv("THAW_IMAGE")
	if img == "" {
		t.Skip("THAW_IMAGE is not set: this test runs QEMU on the guest image")
	}
	var im struct {
		Cmdline string `json:"cmdline"`
	}
	if b, err := os.ReadFile(filepath.Join(img, "image.json")); err != nil || json.Unmarshal(b, &im) != nil {
		t.Fatalf("image.json: %v", err)
	}
	dir := t.TempDir()
	fnDisk := filepath.Join(dir, "fn.img")
	if err := os.WriteFile(fnDisk, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	return vmm.Spec{ID: id, RunDir: filepath.Join(dir, id), MemoryMiB: 128, VCPUs: 1, Accel: vmm.AccelTCG,
		Kernel: filepath.Join(img, "vmlinuz"), Initrd: filepath.Join(img, "initrd.img"), Cmdline: im.Cmdline + " thaw.function=none",
		Disks:  []vmm.Disk{{Path: filepath.Join(img, "rootfs.ext4"), ReadOnly: true}, {Path: fnDisk, ReadOnly: true}},
		Memory: vmm.Memory{Path: filepath.Join(dir, id+".mem"), Shared: true}, GenID: vmm.NewGenID(), EmptyNetNS: true}
}

// realSettings are QEMU's settings with the interposer make build leaves
// in bin/.
func realSettings(t *testing.T) Settings {
	t.Helper()
	shim, err := filepath.Abs("../../../bin/libthaw_shim.so")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shim); err != nil {
		t.Fatalf("interposer not built (make build): %v", err)
	}
	return Settings{Shim: shim}
}

// netInterfaces lists the interfaces of pid's network namespace.
func netInterfaces(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n")[2:] {
		if name, _, ok := strings.Cut(strings.TrimSpace(l), ":"); ok {
			out = append(out, name)
		}
	}
	return out
}

// TestStartInEmptyNetNS boots a guest on user networking (restrict=on, no
// tap) with QEMU in a network namespace of its own: QEMU sees nothing but a
// loopback, and the guest still boots with its NIC up. Killing it is
// thaw's stop.
func TestStartInEmptyNetNS(t *testing.T) {
	spec := realSpec(t, "netns")
	ctx := context.Background()
	m, err := Start(ctx, spec, realSettings(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Kill()
	mine, _ := os.Readlink("/proc/self/ns/net")
	theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", m.PID()))
	if err != nil || theirs == mine {
		t.Fatalf("qemu's network namespace %q (%v), the test's %q: want another", theirs, err, mine)
	}
	if got := netInterfaces(t, m.PID()); strings.Join(got, ",") != "lo" {
		t.Errorf("qemu's namespace has interfaces %q, want only lo", got)
	}
	bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, err := agent.NewConn(m.Agent()).WaitReady(bctx, 2*time.Second); err != nil {
		t.Fatalf("agent not ready: %v; console: %s", err, logTail(filepath.Join(spec.RunDir, "console.log"), 2000))
	}
	if console, _ := os.ReadFile(filepath.Join(spec.RunDir, "console.log")); !strings.Contains(string(console), "network up: eth0") {
		t.Errorf("the guest's NIC is not up on user networking:\n%s", console)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	if ex := m.Exit(); ex.End.Cause != vmend.Stopped || !strings.HasPrefix(ex.Reason, "stopped by thaw;") ||
		!strings.Contains(ex.Reason, "qemu killed by signal 9 (SIGKILL)") {
		t.Errorf("exit after Kill: %s (%s)", ex.Reason, ex.End.Cause)
	}
}

// Real QEMU ends, each classified: refused at start (its error leads), and
// a crash.
func TestExitReasons(t *testing.T) {
	ctx := context.Background()
	t.Run("qemu refuses to start", func(t *testing.T) {
		spec := realSpec(t, "badmem")
		// A restore from a memory file far smaller than guest RAM.
		spec.Memory.Shared, spec.Incoming = false, true
		if err := os.WriteFile(spec.Memory.Path, make([]byte, 4096), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Start(ctx, spec, realSettings(t))
		if err == nil || !strings.Contains(err.Error(), "exited during start-up: qemu failed to start: qemu-system-x86_64: ") ||
			!strings.Contains(err.Error(), "qemu exited with status 1") {
			t.Fatalf("start: %v", err)
		}
	})
	t.Run("the device state does not load", func(t *testing.T) {
		spec := realSpec(t, "badstate")
		spec.Incoming = true
		m, err := Start(ctx, spec, realSettings(t))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Kill()
		state := filepath.Join(spec.RunDir, "not-a-stream")
		if err := os.WriteFile(state, []byte("not a migration stream"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := m.LoadState(ctx, state); err == nil {
			t.Fatal("a garbage device state loaded")
		}
		polltest.Receive(t, m.Done(), 10*time.Second, "qemu to end after a failed load")
		if ex := m.Exit(); ex.End.Cause != vmend.VMMError || !strings.HasPrefix(ex.Reason, "qemu failed: qemu-system-x86_64: load of migration failed") {
			t.Errorf("exit: %s (%s)", ex.Reason, ex.End.Cause)
		}
	})
	t.Run("qemu crashes", func(t *testing.T) {
		spec := realSpec(t, "crash")
		spec.Incoming = true // waits for a device state: no guest runs
		m, err := Start(ctx, spec, realSettings(t))
		if err != nil {
			t.Fatal(err)
		}
		defer m.Kill()
		if err := syscall.Kill(m.PID(), syscall.SIGSEGV); err != nil {
			t.Fatal(err)
		}
		polltest.Receive(t, m.Done(), 10*time.Second, "qemu to die of SIGSEGV")
		if ex := m.Exit(); ex.End.Cause != vmend.VMMCrash || !strings.HasPrefix(ex.Reason, "qemu crashed (SIGSEGV); qemu killed by signal 11") || ex.Requested {
			t.Errorf("exit: %s (%s)", ex.Reason, ex.End.Cause)
		}
	})
}
