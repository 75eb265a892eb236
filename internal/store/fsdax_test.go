package store

import (
	"bytes"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
)

// TestFSDAX runs where THAW_FSDAX_DIR is a directory on a file system
// mounted -o dax over persistent memory. No host of ours has any, so
// e2e/fsdax_test.go boots a guest whose kernel turns part of its RAM into a
// pmem device (memmap=N!S), mounts ext4 -o dax on it, and runs this test
// there: the store must classify the tier as fsdax, store a copy whose file
// really is DAX (statx), and a private mapping of the copy, populated for
// reading the way premap's interposer does, must read the snapshot's bytes
// and copy-on-write without touching the copy.
func TestFSDAX(t *testing.T) {
	s := openKind(t, envPath(t, "THAW_FSDAX_DIR", "no persistent memory here (e2e/fsdax_test.go runs this in a guest with a pmem device)"), FSDAX, 0)
	const pages = 2048 // 8 MiB of guest memory
	data := []uint64{0, 1, 3, 100, 1000, 2047}
	src, fi := memFile(t, pages, data)
	e, err := s.Put("snap-dax", src, fi)
	if err != nil {
		t.Fatal(err)
	}
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, e.Path, 0, unix.STATX_ALL, &stx); err != nil {
		t.Fatal(err)
	}
	if stx.Attributes_mask&unix.STATX_ATTR_DAX == 0 || stx.Attributes&unix.STATX_ATTR_DAX == 0 {
		t.Fatalf("the store copy is not a DAX file (statx attributes %#x mask %#x)", stx.Attributes, stx.Attributes_mask)
	}
	regions, err := s.Regions(e)
	if err != nil || len(regions) != 4 { // 0-3 (gap filled), 100, 1000, 2047
		t.Fatalf("regions %+v %v", regions, err)
	}
	f, err := os.Open(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, pages*int(memlayout.PageSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	const madvPopulateRead = 22
	if err := unix.Madvise(m, madvPopulateRead); err != nil {
		t.Fatalf("MADV_POPULATE_READ over a DAX file: %v", err)
	}
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(m, want) {
		t.Fatal("the private mapping of the DAX copy does not read the snapshot's bytes")
	}
	for _, p := range data {
		m[p*memlayout.PageSize] ^= 0xff // the guest writes
	}
	got, err := os.ReadFile(e.Path)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a write through the private mapping reached the DAX copy (%v)", err)
	}
	in, err := s.Info()
	if err != nil || in.Kind != FSDAX || len(in.Entries) != 1 || in.UsedBytes != e.Bytes {
		t.Fatalf("info %+v %v", in, err)
	}
	t.Logf("fsdax store %s: copy %d KiB in %d regions, DAX file, private populated mapping reads the snapshot and copies on write", s.Dir(), e.Bytes>>10, len(regions))
}
