package pagemap

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// This process maps a file, touches some pages, and sees exactly those
// mapped and, after clearing, referenced.
func TestPresentFileBaseReferenced(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mem file")
	const pages = 64
	if err := os.WriteFile(path, make([]byte, pages*PageSize), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Map pages 8.. of the file, as a layout maps one region.
	m, err := unix.Mmap(int(f.Fd()), 8*PageSize, (pages-8)*PageSize, unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	_ = unix.Madvise(m, unix.MADV_RANDOM) // no fault-around of neighbours
	addr := uintptr(unsafePointer(m))
	pid := os.Getpid()
	base, err := FileBase(pid, path)
	if err != nil {
		t.Fatal(err)
	}
	if base != addr-8*PageSize {
		t.Fatalf("base %#x, want %#x", base, addr-8*PageSize)
	}
	for _, p := range []int{8, 9, 30, 63} {
		sink += m[(p-8)*PageSize]
	}
	bits, err := Present(pid, base, pages)
	if err != nil {
		t.Fatal(err)
	}
	for p := uint64(0); p < pages; p++ {
		want := p == 8 || p == 9 || p == 30 || p == 63
		// Fault-around may map neighbours of a touched page that are cached.
		if want && !Has(bits, p) {
			t.Errorf("page %d touched but not present", p)
		}
		if p < 8 && Has(bits, p) {
			t.Errorf("page %d outside the mapping present", p)
		}
	}
	if _, err := FileBase(pid, filepath.Join(t.TempDir(), "none")); err == nil {
		t.Fatal("base of a missing file")
	}
	if err := ClearReferenced(pid); err != nil {
		t.Fatal(err)
	}
	before, err := Referenced(pid, addr, addr+uintptr(len(m)))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{10, 11, 12} {
		sink += m[(p-8)*PageSize]
	}
	after, err := Referenced(pid, addr, addr+uintptr(len(m)))
	if err != nil {
		t.Fatal(err)
	}
	if after < before+3*PageSize || after > before+(pages-8)*PageSize {
		t.Fatalf("referenced %d bytes before, %d after touching 3 pages", before, after)
	}
}

// sink keeps the test's reads of mapped pages from being optimized away.
var sink byte

func TestParseMapsLine(t *testing.T) {
	s, e, off, p, ok := parseMapsLine("7f00a0000000-7f00a0010000 r--p 00002000 fd:00 1000    /srv/a b/memory")
	if !ok || s != 0x7f00a0000000 || e != 0x7f00a0010000 || off != 0x2000 || p != "/srv/a b/memory" {
		t.Fatalf("%x %x %x %q %v", s, e, off, p, ok)
	}
	if _, _, _, _, ok := parseMapsLine("7f00a0000000-7f00a0010000 rw-p 00000000 00:00 0"); ok {
		t.Fatal("anonymous line has a path")
	}
	if !isRangeLine("7f00a0000000-7f00a0010000 rw-p 00000000 00:00 0") || isRangeLine("Referenced:   4 kB") {
		t.Fatal("range lines")
	}
}
