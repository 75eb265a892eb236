package faulttrace

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// object compiles the program into a temporary directory, or skips.
func object(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("loading BPF programs needs root")
	}
	if _, err := exec.LookPath("clang"); err != nil {
		t.Skip("clang is not installed (make deps)")
	}
	out := filepath.Join(t.TempDir(), ObjectFile)
	cmd := exec.Command("clang", "-O2", "-g", "-Wall", "-Werror", "-target", "bpf",
		"-I/usr/include/"+map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[runtime.GOARCH]+"-linux-gnu",
		"-c", "../../bpf/faulttrace.bpf.c", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("clang: %v\n%s", err, b)
	}
	return out
}

// TestCountsOwnFaultsAndReads: faults on fresh memory and a read of a file
// evicted from the page cache are counted for this process.
func TestCountsOwnFaultsAndReads(t *testing.T) {
	tr, err := Open(object(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	pid := os.Getpid()
	before, err := tr.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(-1, 0, 64<<12, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(m); i += 4096 {
		m[i] = 1
	}
	_ = unix.Munmap(m)
	path := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(path, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = f.Sync()
	_ = unix.Fdatasync(int(f.Fd()))
	exec.Command("sync").Run()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, 1<<20), 0); err != nil {
		t.Fatal(err)
	}
	after, err := tr.Read(pid)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	t.Logf("%+v", d)
	if d.Faults < 64 {
		t.Errorf("%d faults counted, want at least the 64 pages touched", d.Faults)
	}
	if d.ReadBios == 0 || d.ReadBytes < 1<<20 {
		t.Errorf("read %d bios of %d bytes, want the evicted MiB read", d.ReadBios, d.ReadBytes)
	}
	if d.Blocked == 0 || d.BlockedNS == 0 {
		t.Errorf("no time blocked counted waiting for the read")
	}
	tr.Forget(pid)
	if c, err := tr.Read(pid); err != nil || c.Faults > after.Faults {
		t.Errorf("after Forget: %+v, %v", c, err)
	}
}

func TestOpenRefusesMissingProgram(t *testing.T) {
	if _, err := Open(""); err == nil {
		t.Error("no program: no error")
	}
	if _, err := Open(filepath.Join(t.TempDir(), "none.o")); err == nil {
		t.Error("missing program: no error")
	}
}

// Forget drops tgid's counters (a process that exited).
func (t *Tracer) Forget(tgid int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.coll != nil {
		_ = t.coll.Maps["procs"].Delete(uint32(tgid))
	}
}
