// Package vmmsuite is the conformance suite every vmm.Backend passes: what
// the daemon relies on of a monitor, run against a real or fake one (in
// containerd's testsuite pattern). A backend's tests call Suite with a
// factory and a guest that boots on it.
package vmmsuite

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Timeout bounds each wait of the suite for a guest (its agent answering
// after a boot or a restore); a guest under TCG boots in tens of seconds.
const Timeout = 3 * time.Minute

// BootSpec is a spec that boots a guest whose agent answers, named id,
// with its guest memory a new shared file in a run directory of its own.
type BootSpec func(t *testing.T, id string) vmm.Spec

// Suite runs the conformance tests of the backend newBackend makes, each
// VM from bootSpec.
func Suite(t *testing.T, newBackend func(t *testing.T) vmm.Backend, bootSpec BootSpec) {
	tests := []struct {
		name string
		run  func(t *testing.T, b vmm.Backend, boot BootSpec)
	}{
		{"Identity", testIdentity},
		{"RefusesBadSpecs", testRefusesBadSpecs},
		{"BootAgentPauseResumeKill", testBootAgentPauseResumeKill},
		{"SnapshotRestoreEachMemoryForm", testSnapshotRestore},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newBackend(t), bootSpec) })
	}
}

// testIdentity: a backend names itself, its version and the guest hardware
// it builds (snapshots record all three).
func testIdentity(t *testing.T, b vmm.Backend, _ BootSpec) {
	v, err := b.Version(context.Background())
	if err != nil || v == "" {
		t.Errorf("Version = %q, %v", v, err)
	}
	if b.Name() == "" || b.MachineABI() == "" {
		t.Errorf("Name %q, MachineABI %q: want both", b.Name(), b.MachineABI())
	}
}

// testRefusesBadSpecs: a spec that cannot run is an error from Start, with
// no machine, whatever part of it is wrong.
func testRefusesBadSpecs(t *testing.T, b vmm.Backend, boot BootSpec) {
	restoreOf := func(t *testing.T, id string) vmm.Spec {
		s := boot(t, id)
		s.Incoming, s.Memory.Shared, s.Memory.File.KeepIntact = true, false, true
		return s
	}
	tests := []struct {
		name string
		spec func(t *testing.T) vmm.Spec
	}{
		{"no id", func(t *testing.T) vmm.Spec { s := boot(t, "bad-id"); s.ID = ""; return s }},
		{"no memory file", func(t *testing.T) vmm.Spec { s := boot(t, "bad-mem"); s.Memory.Path = ""; return s }},
		{"restore from a memory file that is not there", func(t *testing.T) vmm.Spec {
			return restoreOf(t, "bad-missing")
		}},
		{"misaligned layout", func(t *testing.T) vmm.Spec {
			s := restoreOf(t, "bad-layout")
			writeSized(t, s.Memory.Path, s.MemoryMiB)
			s.Memory.Backing = vmm.Backing{Kind: vmm.BackedByLayout, Layout: &vmm.Layout{Size: uint64(s.MemoryMiB) << 20,
				Ranges: []vmm.Range{{GuestOff: 512, Length: vmm.PageSize, Source: vmm.SourceMemoryFile}}}}
			return s
		}},
		{"layout naming a loading set that is not there", func(t *testing.T) vmm.Spec {
			s := restoreOf(t, "bad-ls")
			writeSized(t, s.Memory.Path, s.MemoryMiB)
			s.Memory.Backing = vmm.Backing{Kind: vmm.BackedByLayout, Layout: &vmm.Layout{Size: uint64(s.MemoryMiB) << 20,
				LoadingSet: filepath.Join(t.TempDir(), "absent"),
				Ranges:     []vmm.Range{{Length: vmm.PageSize, Source: vmm.SourceLoadingSet}}}}
			return s
		}},
		{"userfaultfd socket nobody listens on", func(t *testing.T) vmm.Spec {
			s := restoreOf(t, "bad-uffd")
			writeSized(t, s.Memory.Path, s.MemoryMiB)
			s.Memory.Backing = vmm.Backing{Kind: vmm.BackedByUffd, UffdSocket: filepath.Join(t.TempDir(), "uffd.sock")}
			return s
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := b.Start(context.Background(), tt.spec(t))
			if err == nil {
				_ = m.Kill()
				t.Fatal("Start succeeded")
			}
			if m != nil {
				t.Errorf("Start failed (%v) but returned a machine", err)
			}
		})
	}
}

// writeSized makes path a file of mib MiB.
func writeSized(t *testing.T, path string, mib int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(mib)<<20); err != nil {
		t.Fatal(err)
	}
}

// boot starts bootSpec's guest and waits for its agent.
func boot(t *testing.T, b vmm.Backend, spec vmm.Spec) (vmm.Machine, *agent.Conn) {
	t.Helper()
	m, err := b.Start(context.Background(), spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = m.Kill() })
	conn := agent.NewConn(m.Agent())
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if _, err := conn.WaitReady(ctx, time.Second); err != nil {
		t.Fatalf("agent of a booted guest: %v (%s)", err, exitOf(m))
	}
	return m, conn
}

// exitOf describes how m ended, if it did.
func exitOf(m vmm.Machine) string {
	select {
	case <-m.Done():
		return "vmm exited: " + m.Exit().Reason
	default:
		return "vmm still running"
	}
}

// testBootAgentPauseResumeKill: a booted guest's agent answers on the
// channel the machine hands over, through a pause and a resume; Kill
// stops the process, reports the stop as requested and closes the channel.
func testBootAgentPauseResumeKill(t *testing.T, b vmm.Backend, bootSpec BootSpec) {
	m, conn := boot(t, b, bootSpec(t, "suite-boot"))
	if m.PID() <= 0 {
		t.Errorf("PID %d", m.PID())
	}
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := m.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := conn.Ping(ctx); err != nil {
		t.Fatalf("agent after resume: %v", err)
	}
	pid := m.PID()
	if err := m.Kill(); err != nil {
		t.Fatalf("kill: %v", err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Kill returned before Done was closed")
	}
	if e := m.Exit(); !e.Requested || e.At.IsZero() {
		t.Errorf("exit after Kill %+v: want requested, with its time", e)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("process %d after Kill: %v, want gone", pid, err)
	}
	_ = m.Agent().SetReadDeadline(time.Now().Add(10 * time.Second))
	var ne net.Error
	if _, err := m.Agent().Read(make([]byte, 1)); err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Errorf("agent channel after Kill: read %v, want it closed", err)
	}
	if err := m.Kill(); err != nil {
		t.Errorf("second Kill: %v", err)
	}
}

// memoryForms are the forms of restored memory every backend maps: the
// file whole, and a layout of it (in two ranges, then populated).
func memoryForms(size uint64) map[string]vmm.Backing {
	half := size / 2
	two := []vmm.Range{{Length: half, Source: vmm.SourceMemoryFile}, {GuestOff: half, Length: half, FileOff: half, Source: vmm.SourceMemoryFile}}
	return map[string]vmm.Backing{
		"whole file":       {},
		"layout":           {Kind: vmm.BackedByLayout, Layout: &vmm.Layout{Size: size, Ranges: two}},
		"populated layout": {Kind: vmm.BackedByLayout, Layout: &vmm.Layout{Size: size, Ranges: two, Populate: true}},
	}
}

// testSnapshotRestore: a paused guest's device state saved beside its
// memory file restores, in each memory form, into a VM whose agent answers
// as a new clone; the memory file, kept intact, is not changed by it.
func testSnapshotRestore(t *testing.T, b vmm.Backend, bootSpec BootSpec) {
	spec := bootSpec(t, "suite-snap")
	m, _ := boot(t, b, spec)
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	if err := m.Pause(ctx); err != nil {
		t.Fatalf("pause: %v", err)
	}
	state := filepath.Join(t.TempDir(), "state")
	if err := m.SaveState(ctx, state); err != nil {
		t.Fatalf("save state: %v", err)
	}
	if st, err := os.Stat(state); err != nil || st.Size() == 0 {
		t.Fatalf("device state: %v %v", st, err)
	}
	if err := m.Kill(); err != nil {
		t.Fatal(err)
	}
	sum := fileSum(t, spec.Memory.Path)
	for name, backing := range memoryForms(uint64(spec.MemoryMiB) << 20) {
		t.Run(name, func(t *testing.T) {
			r := bootSpec(t, "suite-restore")
			r.Incoming, r.MemoryMiB = true, spec.MemoryMiB
			r.Memory = vmm.Memory{Path: spec.Memory.Path, Backing: backing, File: vmm.FileUse{KeepIntact: true}}
			restored(t, b, r, state)
			if fileSum(t, spec.Memory.Path) != sum {
				t.Error("the memory file kept intact changed")
			}
		})
	}
}

// restored starts spec (a restore), loads state, resumes and waits for the
// agent to answer as a restored clone; then kills it.
func restored(t *testing.T, b vmm.Backend, spec vmm.Spec, state string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	m, err := b.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer m.Kill()
	if err := m.LoadState(ctx, state); err != nil {
		t.Fatalf("load state: %v (%s)", err, exitOf(m))
	}
	if err := m.Resume(ctx); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if _, err := agent.NewConn(m.Agent()).Restore(ctx, make([]byte, 32)); err != nil {
		t.Fatalf("agent of the restored guest: %v (%s)", err, exitOf(m))
	}
}

// fileSum is the SHA-256 of path's bytes.
func fileSum(t *testing.T, path string) [32]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return [32]byte(h.Sum(nil))
}
