package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/hugetest"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// memFile writes a sparse "guest memory" file with data pages at the given
// page numbers and returns its path and manifest description.
func memFile(t *testing.T, pages uint64, data []uint64) (string, snapshot.FileInfo) {
	t.Helper()
	return memFileZeros(t, pages, data, nil)
}

// memFileZeros is memFile with, also, pages of zeros written at zeros
// (data to SEEK_DATA, nothing to store).
func memFileZeros(t *testing.T, pages uint64, data, zeros []uint64) (string, snapshot.FileInfo) {
	t.Helper()
	src := filepath.Join(t.TempDir(), "src")
	f, err := os.Create(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(int64(pages * memlayout.PageSize)); err != nil {
		t.Fatal(err)
	}
	write := func(p uint64, page []byte) {
		if _, err := f.WriteAt(page, int64(p*memlayout.PageSize)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range data {
		write(p, bytes.Repeat([]byte{byte(p%251 + 1)}, int(memlayout.PageSize)))
	}
	for _, p := range zeros {
		write(p, make([]byte, memlayout.PageSize))
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
	return openKind(t, dir, TmpFS, 0)
}

// openKind opens the store at path and checks that it is on a medium of
// kind with pages of pageSize bytes (0: any size).
func openKind(t *testing.T, path string, kind Kind, pageSize int64) *Store {
	t.Helper()
	s, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind() != kind || (pageSize != 0 && s.PageSize() != pageSize) {
		t.Fatalf("kind %s page %d, want %s with pages of %d", s.Kind(), s.PageSize(), kind, pageSize)
	}
	return s
}

// envPath is the path the environment variable name gives, or skips t
// (why says where the test does run).
func envPath(t *testing.T, name, why string) string {
	t.Helper()
	path := os.Getenv(name)
	if path == "" {
		t.Skipf("%s is not set: %s", name, why)
	}
	return path
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
	if err != nil || len(ext) != 2 || ext[0] != (memlayout.PageRun{Start: 0, Pages: 4}) || ext[1] != (memlayout.PageRun{Start: 100, Pages: 1}) {
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
	os.Chmod(dir, 0o700)
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
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "thaw-test", dir).CombinedOutput(); err != nil {
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

// hugeStore is a store on a hugetlbfs mount whose pool has pages 2 MiB
// pages to spare.
func hugeStore(t *testing.T, pages int) *Store {
	t.Helper()
	s := openKind(t, hugetest.Mount(t, pages), HugeTLBFS, 2<<20)
	t.Cleanup(func() { os.RemoveAll(s.MetaDir()) })
	return s
}

// On hugetlbfs the copy holds whole huge pages, only those with a non-zero
// byte, and records its regions (the tier has no SEEK_DATA).
func TestHugeTLBFSPutGetRemove(t *testing.T) {
	s := hugeStore(t, 8)
	const per = 512 // 4 KiB pages per huge page
	// 8 huge pages of guest memory: data in huge pages 0, 1 (adjacent:
	// one region), 5; huge page 3 is allocated in the source but zero.
	src, fi := memFile(t, 8*per, []uint64{0, per + 7, 5*per + 511})
	f, err := os.OpenFile(src, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, memlayout.PageSize), 3*per*int64(memlayout.PageSize)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	e, err := s.Put("snap-huge", src, fi)
	if err != nil {
		t.Fatal(err)
	}
	want := []Extent{{Start: 0, Pages: 2 * per}, {Start: 5 * per, Pages: per}}
	if len(e.Extents) != len(want) || e.Extents[0] != want[0] || e.Extents[1] != want[1] || e.Regions != 2 {
		t.Fatalf("extents %+v, want %+v", e.Extents, want)
	}
	if e.Bytes != 3<<21 || e.PageSize != 2<<20 {
		t.Errorf("store bytes %d page %d, want 3 huge pages", e.Bytes, e.PageSize)
	}
	got, err := snapshot.HashFile(e.Path)
	if err != nil || got.SHA256 != fi.SHA256 || got.Size != fi.Size {
		t.Fatalf("stored copy differs: %v %+v vs %+v", err, got, fi)
	}
	g, err := s.Get("snap-huge")
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.Regions(g); err != nil || len(r) != 2 {
		t.Fatalf("regions of the reloaded entry: %v %v", r, err)
	}
	in, err := s.Info()
	if err != nil || in.Kind != HugeTLBFS || in.UsedBytes != 3<<21 || in.CapacityBytes < 8<<21 || len(in.Entries) != 1 {
		t.Fatalf("info %+v %v", in, err)
	}
	if err := s.Remove("snap-huge"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("snap-huge"); !errors.Is(err, ErrNotStored) {
		t.Fatalf("after remove: %v", err)
	}
}

// A pool too small for the copy: ErrFull, nothing left behind, every huge
// page given back.
func TestHugeTLBFSPoolFull(t *testing.T) {
	s := hugeStore(t, 1)
	before, _ := s.Info()
	// Data in 3 huge pages: at least 2 more than this test's one page
	// (other tests may hold pages of their own, never ours).
	src, fi := memFile(t, 3*512, []uint64{0, 512, 1024})
	if before.FreeBytes >= 3<<21 {
		t.Skipf("the pool has %d MiB free from elsewhere; cannot make it run out", before.FreeBytes>>20)
	}
	if _, err := s.Put("snap-big", src, fi); !errors.Is(err, ErrFull) {
		t.Fatalf("put into a full pool: %v, want ErrFull", err)
	}
	ents, _ := os.ReadDir(s.Dir())
	if len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
	after, _ := s.Info()
	if after.FreeBytes != before.FreeBytes {
		t.Fatalf("pool free %d MiB after a failed put, %d before", after.FreeBytes>>20, before.FreeBytes>>20)
	}
}

// hugetlbfs without configured huge pages (here: 1 GiB pages, which no
// test configures) is refused with what to do instead, and so is a
// device-DAX path that is no device.
func TestOpenRefusesUnusableTiers(t *testing.T) {
	if _, err := Open("/dev/dax0.0"); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not a device-DAX character device") {
		t.Fatalf("device-DAX: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("mounting hugetlbfs needs root")
	}
	if b, err := os.ReadFile("/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Skipf("1 GiB huge pages are configured or unsupported here (%q %v)", b, err)
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "hugetlbfs", "-o", "pagesize=1G,mode=0700", "thaw-test", dir).CombinedOutput(); err != nil {
		t.Skipf("mount hugetlbfs pagesize=1G: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	if _, err := Open(dir); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "nr_hugepages") {
		t.Fatalf("hugetlbfs without a pool: %v", err)
	}
}

// Opening a store drops what an interrupted Put or a replaced hugetlbfs
// mount leaves: a copy without a description, a description without a copy.
func TestOpenDropsHalfEntries(t *testing.T) {
	s := hugeStore(t, 4)
	src, fi := memFile(t, 1024, []uint64{0})
	if _, err := s.Put("snap-a", src, fi); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put("snap-b", src, fi); err != nil {
		t.Fatal(err)
	}
	// snap-a's copy is gone (the mount was replaced); snap-b's description is.
	if err := os.Remove(filesOf(s).memPath("snap-a")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filesOf(s).metaPath("snap-b")); err != nil {
		t.Fatal(err)
	}
	s2, err := Open(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filesOf(s2).metaPath("snap-a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("description without a copy kept: %v", err)
	}
	if _, err := os.Stat(filesOf(s2).memPath("snap-b")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("copy without a description kept: %v", err)
	}
	if in, err := s2.Info(); err != nil || len(in.Entries) != 0 || in.UsedBytes != 0 {
		t.Fatalf("info %+v %v", in, err)
	}
}

// A store directory someone else could have made first in a shared place
// (/dev/shm) is refused, never fixed up and used: another owner, group or
// other permissions, a symlink, a non-directory; so is such a parent.
func TestOpenRefusesForeignDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating directories owned by another user needs root")
	}
	base := filepath.Join("/dev/shm", fmt.Sprintf("thaw-store-test-%d", os.Getpid()))
	os.MkdirAll(base, 0o700)
	os.Chmod(base, 0o700)
	t.Cleanup(func() { os.RemoveAll(base) })
	mk := func(name string, mode os.FileMode, uid int) string {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
		os.Chown(p, uid, uid)
		return p
	}
	foreign := mk("foreign", 0o700, 65534)
	groupw := mk("group", 0o770, 0)
	world := mk("world", 0o1777, 0)
	target := mk("target", 0o700, 0)
	link := filepath.Join(base, "link")
	os.Symlink(target, link)
	file := filepath.Join(base, "file")
	os.WriteFile(file, nil, 0o600)
	attackerParent := mk("attacker-parent", 0o1777, 65534)
	for _, dir := range []string{foreign, groupw, world, link, file, filepath.Join(attackerParent, "x")} {
		_, err := Open(dir)
		if !errors.Is(err, ErrNotPrivate) {
			t.Errorf("Open(%s) = %v, want ErrNotPrivate", dir, err)
		}
	}
	for _, dir := range []string{foreign, groupw, world} {
		st, _ := os.Lstat(dir)
		if st.Mode().Perm()&0o077 == 0 && dir != foreign {
			t.Errorf("%s was chmod-ed", dir)
		}
	}
	// A missing directory is created private, whatever the umask.
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	fresh := filepath.Join(base, "fresh", "store")
	s, err := Open(fresh)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []string{fresh, filepath.Dir(fresh)} {
		if st, _ := os.Lstat(d); st.Mode().Perm() != 0o700 {
			t.Errorf("%s created %04o", d, st.Mode().Perm())
		}
	}
}

// filesOf is a hugetlbfs store's files.
func filesOf(s *Store) *fileTier { return &s.t.(*hugeTier).fileTier }
