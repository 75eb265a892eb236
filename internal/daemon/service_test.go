package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/tsc"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
)

// fakeService is a whole daemon on the fake VMM: everything but QEMU and
// the guest is real (catalog, snapshots, restore strategies, users,
// cgroups, network namespaces), so it needs root.
func fakeService(t *testing.T, edit func(*Config)) (*Service, *vmmtest.Fake) {
	t.Helper()
	return fakeServiceLog(t, edit, io.Discard)
}

// fakeServiceLog is fakeService logging to logw.
func fakeServiceLog(t *testing.T, edit func(*Config), logw io.Writer) (*Service, *vmmtest.Fake) {
	t.Helper()
	h := vmmtest.NewHost(t, "thaw-unit-")
	b := &vmmtest.Fake{}
	cfg := Config{DataDir: h.DataDir, ImageDir: h.ImageDir, Accel: "tcg", DefaultMemoryMiB: 128, DefaultVCPUs: 1,
		BootTimeout: 10 * time.Second, InvokeTimeout: 5 * time.Second, StoreDir: h.StoreDir, VMM: b}
	if edit != nil {
		edit(&cfg)
	}
	s, err := New(context.Background(), cfg, slog.New(slog.NewTextHandler(logw, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, b
}

func createFn(t *testing.T, s *Service, name string) { createSpec(t, s, FunctionSpec{Name: name}) }

// createSpec creates a function of spec, whose handler echoes its event
// unless spec has code of its own.
func createSpec(t *testing.T, s *Service, spec FunctionSpec) {
	t.Helper()
	if spec.Archive == nil {
		spec.Archive = bytes.NewReader(tarGz(t, tarEntry{name: "handler.py", body: "def handle(e): return e\n"}))
	}
	if _, err := s.CreateFunction(context.Background(), spec); err != nil {
		t.Fatal(err)
	}
}

// bootAndSnapshot creates function name, boots it and snapshots the VM.
func bootAndSnapshot(t *testing.T, s *Service, name string) (*catalog.VM, *catalog.Snapshot) {
	t.Helper()
	return bootAndSnapshotSpec(t, s, FunctionSpec{Name: name})
}

// bootAndSnapshotSpec is bootAndSnapshot of a function of spec.
func bootAndSnapshotSpec(t *testing.T, s *Service, spec FunctionSpec) (*catalog.VM, *catalog.Snapshot) {
	t.Helper()
	createSpec(t, s, spec)
	return snapshotOf(t, s, spec.Name)
}

// snapshotOf boots an existing function and snapshots the VM.
func snapshotOf(t *testing.T, s *Service, name string) (*catalog.VM, *catalog.Snapshot) {
	t.Helper()
	vm, err := s.BootVM(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	sn, err := s.CreateSnapshot(context.Background(), vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	return vm, sn
}

// snapshotIDs lists the function's snapshots, oldest first.
func snapshotIDs(t *testing.T, s *Service, function string) []string {
	t.Helper()
	snaps, err := s.ListSnapshots(context.Background(), function)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, sn := range snaps {
		out = append(out, sn.ID)
	}
	return out
}

// The cold path on the fake VMM: boot, snapshot, restore, renew, invoke,
// tear down, record; and what the VMM was asked to start.
func TestColdPath(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive = -1 }) // every cold VM torn down (the pool has its own test)
	ctx := context.Background()
	createFn(t, s, "echo")
	vm, err := s.BootVM(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if vm.State != catalog.StateRunning {
		t.Fatalf("booted vm %+v", vm)
	}
	warm, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{"x":1}`)})
	if err != nil || !warm.OK || string(warm.Result) != `{"x":1}` {
		t.Fatalf("warm: %v %+v", err, warm)
	}
	sn, err := s.CreateSnapshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`"cold"`)}})
	if err != nil || !cold.OK || string(cold.Result) != `"cold"` || cold.Mode != "cold" || cold.Snapshot != sn.ID {
		t.Fatalf("cold: %v %+v", err, cold)
	}
	rt := cold.Timing.Restore
	if rt == nil || rt.SetupMS <= 0 || rt.AgentRestoreMS != 0.5 {
		t.Fatalf("restore timing %+v", rt)
	}
	boot, clone := b.Spec(0), b.Spec(1)
	if !boot.Memory.Shared || boot.Incoming || clone.Memory.Shared || !clone.Incoming {
		t.Errorf("boot %+v / clone %+v memory", boot.Memory, clone.Memory)
	}
	// The boot is told the host's TSC frequency (a clone inherits what
	// its snapshot's kernel took).
	if khz, err := tsc.MeasureKHz(5 * time.Millisecond); err == nil {
		got := strings.TrimPrefix(boot.Cmdline[strings.LastIndex(boot.Cmdline, " tsc_early_khz="):], " tsc_early_khz=")
		if n, err := strconv.Atoi(got); err != nil || math.Abs(float64(n-khz)) > float64(khz)/1000 {
			t.Errorf("boot cmdline %q: want tsc_early_khz near %d", boot.Cmdline, khz)
		}
	}
	if clone.Memory.Path != filepath.Join(sn.Dir, snapshot.MemoryFile) || !clone.Memory.File.KeepIntact {
		t.Errorf("clone memory %+v", clone.Memory)
	}
	if boot.GenID == clone.GenID || clone.User == nil || boot.User == nil || clone.Cgroup == nil || clone.Tap == nil {
		t.Errorf("clone confinement: genid %s/%s user %v cgroup %v tap %v", boot.GenID, clone.GenID, clone.User, clone.Cgroup, clone.Tap)
	}
	if _, err := s.GetVM(ctx, cold.VM); !errors.Is(err, ErrNotFound) {
		t.Errorf("the cold VM was not forgotten: %v", err)
	}
	invs, err := s.ListInvocations(ctx, "echo", 10, time.Time{}, "")
	if err != nil || len(invs) != 2 {
		t.Fatalf("history: %v %d", err, len(invs))
	}
}

// Every failure of the cold path ends in a clear error and a VM that is
// failed and gone, never a live VM nobody holds.
func TestColdPathFailures(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.MaxVMs, c.AdmissionTimeout = 2, 300*time.Millisecond })
	ctx := context.Background()
	vm, sn := bootAndSnapshot(t, s, "echo")
	cold := func(ev string, timeout time.Duration) (*Invocation, error) {
		return s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(ev), Timeout: timeout}})
	}
	t.Run("the handler raises: a completed invocation", func(t *testing.T) {
		inv, err := cold(`{"op":"raise"}`, 0)
		if err != nil || inv.OK || inv.Error == nil || inv.Error.Type != "ValueError" {
			t.Fatalf("%v %+v", err, inv)
		}
	})
	t.Run("the VMM dies during the invocation", func(t *testing.T) {
		_, err := cold(`{"op":"crash"}`, 0)
		if !errors.Is(err, ErrVMFailed) || !strings.Contains(err.Error(), "vm process exited during the invocation: qemu was killed by SIGKILL, not by thaw") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("the guest never answers", func(t *testing.T) {
		_, err := cold(`{"op":"hang"}`, 300*time.Millisecond)
		if !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "invocation timed out after 300ms; guest killed; qemu killed by signal 9 (SIGKILL)") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("the VMM does not start", func(t *testing.T) {
		b.SetStart(func(vmm.Spec) error { return errors.New("no such device") })
		defer b.SetStart(nil)
		_, err := cold(`{}`, 0)
		if !errors.Is(err, ErrVMFailed) || !strings.Contains(err.Error(), "no such device") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("no more live VMs than allowed", func(t *testing.T) {
		second, err := s.BootVM(ctx, "echo")
		if err != nil {
			t.Fatal(err)
		}
		defer s.DeleteVM(ctx, second.ID)
		if _, err := cold(`{}`, 0); !errors.Is(err, ErrTooMany) || !strings.Contains(err.Error(), "admission-timeout") {
			t.Fatalf("%v", err)
		}
	})
	t.Run("a damaged snapshot is refused", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(sn.Dir, snapshot.StateFile), []byte("tampered"), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := cold(`{}`, 0); !errors.Is(err, ErrSnapshotUnusable) {
			t.Fatalf("%v", err)
		}
	})
	// Only the booted VM is live, and every VM user id but its one is free.
	live, uids := s.vms.Count()
	if live != 1 || uids != 1 {
		t.Errorf("after the failures: %d live VMs, %d user ids held, want 1 and 1", live, uids)
	}
	vms, _ := s.ListVMs(ctx)
	for _, v := range vms {
		if v.ID != vm.ID && v.Live() {
			t.Errorf("vm %s left %s", v.ID, v.State)
		}
		if v.State == catalog.StateFailed && v.Reason == "" {
			t.Errorf("vm %s failed without a reason", v.ID)
		}
	}
}

// A snapshot the daemon's machine cannot load is refused before any VMM
// starts, and says why.
func TestSnapshotOfAnotherMachineIsRefused(t *testing.T) {
	s, b := fakeService(t, nil)
	ctx := context.Background()
	_, sn := bootAndSnapshot(t, s, "echo")
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		t.Fatal(err)
	}
	m.Guest.Machine = "pc"
	raw, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sn.Dir, snapshot.ManifestFile), raw, 0o600); err != nil {
		t.Fatal(err)
	}
	before := len(b.Specs())
	_, err = s.InvokeCold(ctx, ColdRequest{Snapshot: sn.ID})
	if !errors.Is(err, ErrSnapshotUnusable) || !strings.Contains(err.Error(), fmt.Sprintf("%q", "pc")) {
		t.Fatalf("%v", err)
	}
	if len(b.Specs()) != before {
		t.Errorf("a VMM was started for an unusable snapshot")
	}
}
