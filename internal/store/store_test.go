package store

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// memFile writes a sparse "guest memory" file with data pages at the given
// page numbers and returns its path and manifest description.
func memFile(t *testing.T, pages uint64, data []uint64) (string, snapshot.FileInfo) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(pages * memlayout.PageSize)); err != nil {
		t.Fatal(err)
	}
	for _, p := range data {
		page := bytes.Repeat([]byte{byte(p%251 + 1)}, int(memlayout.PageSize))
		if _, err := f.WriteAt(page, int64(p*memlayout.PageSize)); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()
	fi, err := snapshot.HashFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return src, fi
}

func tmpfsStore(t *testing.T) *Store {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "thaw-store-test-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind() != TmpFS {
		t.Fatalf("kind %s, want tmpfs", s.Kind())
	}
	return s
}

func TestPutGetRemove(t *testing.T) {
	s := tmpfsStore(t)
	// Pages 0-1 and 3 (a one-page gap: filled), 100 (a large gap: kept).
	src, fi := memFile(t, 256, []uint64{0, 1, 3, 100})
	e, err := s.Put("snap-abc", src, fi)
	if err != nil {
		t.Fatal(err)
	}
	if e.Regions != 2 {
		t.Errorf("regions %d, want 2 (gap of one page filled, large gap kept)", e.Regions)
	}
	if e.Bytes != 5*int64(memlayout.PageSize) {
		t.Errorf("store bytes %d, want 5 pages", e.Bytes)
	}
	got, err := snapshot.HashFile(e.Path)
	if err != nil || got.SHA256 != fi.SHA256 {
		t.Fatalf("stored copy differs: %v %s vs %s", err, got.SHA256, fi.SHA256)
	}
	f, _ := os.Open(e.Path)
	ext, err := Extents(f, e.Size)
	f.Close()
	if err != nil || len(ext) != 2 || ext[0] != (memlayout.Region{Start: 0, Pages: 4}) || ext[1] != (memlayout.Region{Start: 100, Pages: 1}) {
		t.Fatalf("extents %v %v", ext, err)
	}
	again, err := s.Put("snap-abc", src, fi)
	if err != nil || again.SHA256 != e.SHA256 {
		t.Fatalf("second put: %v", err)
	}
	in, err := s.Info()
	if err != nil {
		t.Fatal(err)
	}
	if len(in.Entries) != 1 || in.UsedBytes != e.Bytes || in.CapacityBytes <= 0 {
		t.Fatalf("info %+v", in)
	}
	if err := s.Remove("snap-abc"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("snap-abc"); !errors.Is(err, ErrNotStored) {
		t.Fatalf("get after remove: %v", err)
	}
	if err := s.Remove("snap-abc"); err != nil {
		t.Fatalf("second remove: %v", err)
	}
}

func TestPutRefusesMismatchAndLeavesNothing(t *testing.T) {
	s := tmpfsStore(t)
	src, fi := memFile(t, 64, []uint64{5})
	fi.SHA256 = "0000000000000000000000000000000000000000000000000000000000000000"
	if _, err := s.Put("snap-bad", src, fi); err == nil {
		t.Fatal("put accepted a copy that does not match the manifest")
	}
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	if _, err := s.Put("../etc", src, fi); err == nil {
		t.Fatal("put accepted a path as id")
	}
}

func TestGetDetectsTruncatedCopy(t *testing.T) {
	s := tmpfsStore(t)
	src, fi := memFile(t, 64, []uint64{5})
	e, err := s.Put("snap-trunc", src, fi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(e.Path, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("snap-trunc"); err == nil {
		t.Fatal("truncated copy accepted")
	}
}

func TestOpenRefusesDisk(t *testing.T) {
	dir := t.TempDir()
	var st = mustStatfsType(t, dir)
	if st == 0x01021994 {
		t.Skip("TMPDIR is tmpfs")
	}
	if _, err := Open(dir); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("Open(%s) = %v, want ErrUnsupported", dir, err)
	}
}

// A store too small for the copy refuses it and keeps nothing.
func TestPutFullStore(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "thaw-test", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	s, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pages := make([]uint64, 200) // 800 KiB of data
	for i := range pages {
		pages[i] = uint64(i * 2)
	}
	src, fi := memFile(t, 512, pages)
	if _, err := s.Put("snap-big", src, fi); !errors.Is(err, ErrFull) {
		t.Fatalf("put into a full store: %v, want ErrFull", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func mustStatfsType(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return st.Type
}
