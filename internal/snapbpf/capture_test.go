package snapbpf

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/pagecache"
)

// object builds the capture program with the repository's Makefile and
// returns its path.
func object(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := exec.Command("make", "-s", "-C", root, "bpf").CombinedOutput(); err != nil {
		t.Fatalf("build capture program: %v\n%s", err, out)
	}
	return filepath.Join(root, "bin", ObjectFile)
}

func needRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the capture needs root (CAP_BPF, CAP_PERFMON, tracefs)")
	}
}

func TestCheckNamesMissingObject(t *testing.T) {
	err := Check(filepath.Join(t.TempDir(), "nope.bpf.o"))
	if err == nil || !strings.Contains(err.Error(), "nope.bpf.o") {
		t.Fatalf("Check = %v, want an error naming the object", err)
	}
}

// TestCaptureOrder reads pages of an evicted file under capture and finds
// them in the capture, in order; another file's pages are not captured.
func TestCaptureOrder(t *testing.T) {
	needRoot(t)
	obj := object(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "memory")
	other := filepath.Join(dir, "other")
	buf := make([]byte, 64*4096)
	for i := range buf {
		buf[i] = byte(i*7 + 1)
	}
	for _, p := range []string{path, other} {
		if err := os.WriteFile(p, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := pagecache.Evict(p); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Start(obj, path)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_RANDOM) // one page per read: no readahead
	g, _ := os.Open(other)
	defer g.Close()
	page := make([]byte, 4096)
	want := []uint64{40, 3, 17, 63}
	for _, p := range want {
		if _, err := f.ReadAt(page, int64(p)*4096); err != nil {
			t.Fatal(err)
		}
		_, _ = g.ReadAt(page, int64(p+1)*4096)
	}
	r, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	got := r.Pages()
	t.Logf("captured %d events, %d pages: %v", len(r.Events), len(got), got)
	if r.Dropped != 0 || r.Seen != uint64(len(r.Events)) {
		t.Fatalf("seen %d dropped %d events %d", r.Seen, r.Dropped, len(r.Events))
	}
	// Exactly the read pages, in read order: no readahead (FADV_RANDOM)
	// and nothing of the other file.
	if !slices.Equal(got, want) {
		t.Fatalf("captured %v, want %v", got, want)
	}
}
