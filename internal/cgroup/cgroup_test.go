package cgroup

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func present(t *testing.T) *Manager {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("creating cgroups needs root")
	}
	name := fmt.Sprintf("thaw-test-%d", os.Getpid())
	m, err := Open("/sys/fs/cgroup", name)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range m.dirs {
			_ = syscall.Rmdir(d)
		}
	})
	return m
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestPresentHierarchy drives the cgroup version this host has: limits are
// written, a process is placed, and a group is removed after it exits.
func TestPresentHierarchy(t *testing.T) {
	m := present(t)
	g, err := m.New("vm-limits", Limits{MemoryBytes: 300 << 20, CPUWeight: 50, Tasks: 64})
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() == V1 {
		if got := read(t, filepath.Join(g.dir("memory"), "memory.limit_in_bytes")); got != fmt.Sprint(300<<20) {
			t.Errorf("memory.limit_in_bytes = %s", got)
		}
		if got := read(t, filepath.Join(g.dir("cpu"), "cpu.shares")); got != "512" {
			t.Errorf("cpu.shares = %s, want 512 for weight 50", got)
		}
	} else {
		if got := read(t, filepath.Join(g.dir("memory"), "memory.max")); got != fmt.Sprint(300<<20) {
			t.Errorf("memory.max = %s", got)
		}
		if got := read(t, filepath.Join(g.dir("cpu"), "cpu.weight")); got != "50" {
			t.Errorf("cpu.weight = %s", got)
		}
	}
	if got := read(t, filepath.Join(g.dir("pids"), "pids.max")); got != "64" {
		t.Errorf("pids.max = %s", got)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	own := read(t, fmt.Sprintf("/proc/%d/cgroup", cmd.Process.Pid))
	if !strings.Contains(own, "/"+filepath.Base(m.Parent())+"/vm-limits") {
		t.Errorf("process cgroups:\n%s", own)
	}
	if err := g.Remove(); err == nil {
		t.Errorf("removed a group that still holds a process")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.dir("memory")); !os.IsNotExist(err) {
		t.Errorf("group still there: %v", err)
	}
}

// TestMemoryLimitKills: a process over the group's memory limit is killed
// by the kernel and counted.
func TestMemoryLimitKills(t *testing.T) {
	m := present(t)
	g, err := m.New("vm-oom", Limits{MemoryBytes: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	// The pause lets the process be moved before it allocates (v1 has no clone-into).
	cmd := exec.Command("python3", "-c", "import time; time.sleep(0.3); b = bytearray(256 << 20); print(len(b))")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if err == nil || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("want the process killed by SIGKILL, got %v", err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for g.OOMKills() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if g.OOMKills() == 0 {
		t.Errorf("oom kill not counted")
	}
	c, err := g.MemoryCounters()
	if err != nil || c.OOMKills != 1 || c.LimitBytes != 64<<20 {
		t.Errorf("memory counters %+v, %v: want 1 kill and a 64 MiB limit", c, err)
	}
}

// TestTaskLimit: forks beyond the group's task limit fail.
func TestTaskLimit(t *testing.T) {
	m := present(t)
	g, err := m.New("vm-tasks", Limits{Tasks: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	cmd := exec.Command("sh", "-c", "sleep 0.3; for i in 1 2 3 4 5 6 7 8; do sleep 2 & done; wait")
	out := &strings.Builder{}
	cmd.Stderr = out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Add(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if !strings.Contains(out.String(), "fork") && !strings.Contains(out.String(), "Resource temporarily unavailable") {
		t.Errorf("forks over the limit did not fail: %q", out.String())
	}
}

// TestV2Tree checks the v2 writes on a directory tree shaped like cgroup2
// (this host's controllers are on v1): controllers delegated to the parent
// and its children, limits in v2 units, a directory descriptor for
// CLONE_INTO_CGROUP.
func TestV2Tree(t *testing.T) {
	root := t.TempDir()
	svc := filepath.Join(root, "system.slice", "thawd.service")
	for _, d := range []string{root, filepath.Join(root, "system.slice"), svc} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Children of the parent inherit the controller list when created by the kernel; emulate it.
	parent := filepath.Join(svc, "thaw-x")
	if err := os.MkdirAll(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := openAt(root, map[string]string{"": "/system.slice/thawd.service"}, "thaw-x")
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != V2 {
		t.Fatalf("version %d", m.Version())
	}
	for _, d := range []string{svc, parent} {
		if got := read(t, filepath.Join(d, "cgroup.subtree_control")); got != "+memory +cpu +pids" {
			t.Errorf("%s subtree_control = %q", d, got)
		}
	}
	g, err := m.New("vm-1", Limits{MemoryBytes: 1 << 30, CPUWeight: 200, Tasks: 128})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"memory.max": "1073741824", "memory.swap.max": "0", "cpu.weight": "200", "pids.max": "128"} {
		if got := read(t, filepath.Join(parent, "vm-1", file)); got != want {
			t.Errorf("%s = %q, want %q", file, got, want)
		}
	}
	if g.FD() < 0 {
		t.Errorf("no directory descriptor for CLONE_INTO_CGROUP")
	}
	if _, err := m.New("vm-bad", Limits{CPUWeight: 20000}); err == nil {
		t.Errorf("cpu weight 20000 accepted")
	}
	if _, err := m.New("../escape", Limits{}); err == nil {
		t.Errorf("a name with a slash accepted")
	}
	g.fd, _ = -1, syscall.Close(g.fd)
}

func TestOwnCgroups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cgroup")
	os.WriteFile(p, []byte("9:name=systemd:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/x\n0::/y\n"), 0o644)
	got, err := ownCgroups(p)
	if err != nil {
		t.Fatal(err)
	}
	if got["memory"] != "/process_api/abc" || got["cpu"] != "/x" || got["cpuacct"] != "/x" || got[""] != "/y" {
		t.Errorf("%v", got)
	}
}
