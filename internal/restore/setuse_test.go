package restore

import (
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/pagemap"
)

var sink byte

// presentUse counts, from what this process really mapped of a memory
// file, the set's pages it touched and the non-zero pages it touched
// outside the set; zero regions outside count for nothing.
func TestPresentUse(t *testing.T) {
	const pages = 64
	path := filepath.Join(t.TempDir(), "memory")
	data := make([]byte, pages*memlayout.PageSize)
	for i := range data {
		data[i] = byte(i/int(memlayout.PageSize)) + 1
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := pagecache.Evict(path); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, len(data), unix.PROT_READ, unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	if err := unix.Madvise(m, unix.MADV_RANDOM); err != nil { // each fault reads its page alone
		t.Fatal(err)
	}
	for _, p := range []int{1, 2, 10, 20, 21, 50} {
		sink += m[p*int(memlayout.PageSize)]
	}
	base, err := pagemap.FileBase(os.Getpid(), path)
	if err != nil || base != uintptr(unsafe.Pointer(&m[0])) {
		t.Fatalf("base %#x %v", base, err)
	}
	set := []memlayout.PageRun{{Start: 0, Pages: 4}, {Start: 8, Pages: 4}}       // pages 0-3, 8-11: touched 1, 2, 10
	nonzero := []memlayout.PageRun{{Start: 0, Pages: 32}, {Start: 60, Pages: 4}} // 20, 21 outside and non-zero; 50 zero
	u, err := presentUse(os.Getpid(), base, pages, set, nonzero)
	if err != nil {
		t.Fatal(err)
	}
	if u.SetPages != 8 || u.SetTouchedPages != 3 || u.SetOutsidePages != 2 {
		t.Fatalf("set use %+v, want 8 set pages, 3 touched, 2 outside", u)
	}
}

// MeasureSet reaches a strategy's own session through the daemon's
// wrappers, fills the ratio and the unused pages, and says when there is
// no set.
func TestMeasureSetUnwraps(t *testing.T) {
	inner := &fakeMeasured{u: SetUse{SetPages: 100, SetTouchedPages: 60, SetOutsidePages: 20}}
	u, err := MeasureSet(wrapped{wrapped{inner}}, 1)
	if err != nil || u.SetOutsideRatio != 0.25 || u.SetUnusedPages != 40 {
		t.Fatalf("%+v %v", u, err)
	}
	v, _ := beginVanilla(Snapshot{Dir: t.TempDir()}, Env{}, "")
	if _, err := MeasureSet(v, 1); err != ErrNoSet {
		t.Fatalf("vanilla: %v", err)
	}
}

type fakeMeasured struct {
	Session
	u SetUse
}

func (f *fakeMeasured) MeasureSet(int) (SetUse, error) { return f.u, nil }

// wrapped is a session wrapping another, as the daemon's do.
type wrapped struct{ Session }

func (w wrapped) Unwrap() Session { return w.Session }
