package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

const testAlign = 2 << 20

// regionFile makes a zeroed file of size bytes on /dev/shm to stand in for
// a device.
func regionFile(t *testing.T, size int64) string {
	t.Helper()
	f, err := os.CreateTemp("/dev/shm", "thaw-region-test-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name()
}

func openRegionT(t *testing.T, path string) *Store {
	t.Helper()
	s, err := OpenDeviceFile(path, testAlign)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if s.Kind() != DevDAX || s.PageSize() != testAlign {
		t.Fatalf("kind %s page %d", s.Kind(), s.PageSize())
	}
	return s
}

// image rebuilds guest memory from a clone's maps over the device file.
func image(t *testing.T, c *Clone, size int64) []byte {
	t.Helper()
	dev, err := os.ReadFile(c.Device)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]byte, size)
	for _, m := range c.Maps {
		if m.GuestOff%testAlign != 0 || m.DeviceOff%testAlign != 0 || m.Length%testAlign != 0 {
			t.Fatalf("map %+v is not aligned to the device", m)
		}
		copy(out[m.GuestOff:m.GuestOff+m.Length], dev[m.DeviceOff:m.DeviceOff+m.Length])
	}
	return out
}

// Units (2 MiB = 512 pages) 0, 1 and 3 hold data; unit 2 holds a written
// page of zeros (data to SEEK_DATA, nothing to store); the rest are holes.
func devdaxSource(t *testing.T) (string, []byte) {
	t.Helper()
	src, _ := memFileZeros(t, 4096, []uint64{0, 1, 600, 2047}, []uint64{1100})
	want, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	return src, want
}

func TestDevDAXRegionPutCloneRelease(t *testing.T) {
	s := openRegionT(t, regionFile(t, 32<<20))
	in0, _ := s.Info()
	if in0.CapacityBytes != 30<<20 || in0.FreeBytes != 30<<20 || len(in0.Entries) != 0 {
		t.Fatalf("empty store %+v", in0)
	}
	src, want := devdaxSource(t)
	fi := hashOf(t, src)
	e, err := s.Put("snap-dax", src, fi)
	if err != nil {
		t.Fatal(err)
	}
	if e.Bytes != 3*testAlign || e.Regions != 2 || e.PageSize != testAlign || e.DeviceOffset != 2<<20 {
		t.Fatalf("entry %+v: want units 0,1 and 3 packed (two regions) after the 2 MiB index", e)
	}
	if err := s.Verify(e); err != nil {
		t.Fatal(err)
	}
	regions, err := s.Regions(e)
	if err != nil || len(regions) != 2 || regions[0] != (memlayout.PageRun{Start: 0, Pages: 1024}) || regions[1] != (memlayout.PageRun{Start: 1536, Pages: 512}) {
		t.Fatalf("regions %+v %v", regions, err)
	}
	if again, err := s.Put("snap-dax", src, fi); err != nil || again.DeviceOffset != e.DeviceOffset {
		t.Fatalf("second put: %+v %v", again, err)
	}

	a := cloneT(t, s, "snap-dax", "vm-a")
	b := cloneT(t, s, "snap-dax", "vm-b")
	if a.Offset == b.Offset || a.Offset < e.DeviceOffset+e.Bytes || a.Bytes != e.Bytes || len(a.Maps) != 2 {
		t.Fatalf("clones %+v %+v overlap each other or the copy", a, b)
	}
	if _, err := devOf(s).clone("snap-dax", "vm-a"); err == nil {
		t.Fatal("a VM got a second clone range")
	}
	for _, c := range []*Clone{a, b} {
		if !bytes.Equal(image(t, c, int64(len(want))), want) {
			t.Fatalf("clone %s does not hold the snapshot's memory", c.Owner)
		}
	}
	in, _ := s.Info()
	if in.UsedBytes != e.Bytes || in.ReservedBytes != 2*e.Bytes || in.Clones != 2 || in.FreeBytes != 30<<20-3*e.Bytes {
		t.Fatalf("info with two clones %+v", in)
	}
	// The guest writes into its range: the stored copy and the other
	// clone do not change.
	f, _ := os.OpenFile(a.Device, os.O_RDWR, 0)
	f.WriteAt(bytes.Repeat([]byte{0xee}, 4096), int64(a.Maps[0].DeviceOff))
	f.Close()
	if !bytes.Equal(image(t, b, int64(len(want))), want) {
		t.Fatal("a write into one clone's range reached another")
	}
	s2v := &Store{kind: DevDAX, t: devOf(s)}
	devOf(s).verified = map[string]bool{}
	if err := s2v.Verify(e); err != nil {
		t.Fatalf("a write into a clone's range reached the stored copy: %v", err)
	}

	devOf(s).release("vm-a")
	if got := s.Clones(); len(got) != 1 || got[0] != "vm-b" {
		t.Fatalf("clones after release %v", got)
	}
	c, err := devOf(s).clone("snap-dax", "vm-c")
	if err != nil || c.Offset != a.Offset {
		t.Fatalf("released range not reused: %+v %v", c, err)
	}
	if err := s.Remove("snap-dax"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("snap-dax"); !errors.Is(err, ErrNotStored) {
		t.Fatalf("get after remove: %v", err)
	}
	if _, err := devOf(s).clone("snap-dax", "vm-d"); !errors.Is(err, ErrNotStored) {
		t.Fatalf("clone of a removed copy: %v", err)
	}
	devOf(s).release("vm-b")
	devOf(s).release("vm-c")
	if in, _ := s.Info(); in.FreeBytes != in.CapacityBytes || in.Clones != 0 {
		t.Fatalf("info after releasing everything %+v", in)
	}
}

func hashOf(t *testing.T, path string) snapshot.FileInfo {
	t.Helper()
	fi, err := snapshot.HashFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}

// The index survives closing and reopening (a daemon restart or a reboot);
// clone ranges do not (their VMs are gone). A damaged newest slot falls
// back to the older one; both damaged starts an empty store and says so.
func TestDevDAXRegionIndexPersists(t *testing.T) {
	path := regionFile(t, 32<<20)
	s := openRegionT(t, path)
	src, _ := devdaxSource(t)
	if _, err := s.Put("snap-a", src, hashOf(t, src)); err != nil {
		t.Fatal(err)
	}
	one, _ := memFile(t, 1024, []uint64{7})
	if _, err := s.Put("snap-b", one, hashOf(t, one)); err != nil {
		t.Fatal(err)
	}
	cloneT(t, s, "snap-a", "vm-x")
	newest := devOf(s).slot
	s.Close()

	s = openRegionT(t, path)
	in, _ := s.Info()
	if len(in.Entries) != 2 || in.Clones != 0 || in.ReservedBytes != 0 || s.Notice() != "" {
		t.Fatalf("reopened %+v notice %q", in, s.Notice())
	}
	e, _ := s.Get("snap-a")
	if err := s.Verify(e); err != nil {
		t.Fatalf("copy after reopening: %v", err)
	}
	s.Close()

	// Damage the newest slot: the previous index (snap-a only) is used.
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte("garbage!"), int64(newest)*(1<<20)+100)
	f.Close()
	s = openRegionT(t, path)
	if in, _ := s.Info(); len(in.Entries) != 1 || in.Entries[0].Snapshot != "snap-a" {
		t.Fatalf("after damaging the newest slot: %+v", in)
	}
	s.Close()

	f, _ = os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte("garbage!"), 100)
	f.WriteAt([]byte("garbage!"), 1<<20+100)
	f.Close()
	s = openRegionT(t, path)
	if in, _ := s.Info(); len(in.Entries) != 0 || !strings.Contains(s.Notice(), "damaged") {
		t.Fatalf("after damaging both slots: %+v notice %q", in, s.Notice())
	}
}

// Data that is not a thaw store is never overwritten; a device in use by
// another store is refused.
func TestDevDAXRegionRefusesForeignDataAndSecondUser(t *testing.T) {
	path := regionFile(t, 8<<20)
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte("somebody's database"), 4096)
	f.Close()
	if _, err := OpenDeviceFile(path, testAlign); !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "not a thaw memory store") {
		t.Fatalf("foreign data: %v", err)
	}
	if b, _ := os.ReadFile(path); !bytes.Contains(b, []byte("somebody's database")) {
		t.Fatal("foreign data overwritten")
	}
	clean := regionFile(t, 8<<20)
	openRegionT(t, clean)
	if _, err := OpenDeviceFile(clean, testAlign); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("second store on one device: %v", err)
	}
	if _, err := OpenDeviceFile(clean, 3000); err == nil {
		t.Fatal("alignment 3000 accepted")
	}
	if _, err := OpenDeviceFile(regionFile(t, 3<<20), testAlign); err == nil {
		t.Fatal("a device too small for the index and one unit accepted")
	}
}

// A full device refuses a copy or a clone with ErrFull and keeps nothing;
// a copy that does not match the manifest keeps nothing either.
func TestDevDAXRegionFullAndMismatch(t *testing.T) {
	s := openRegionT(t, regionFile(t, 8<<20)) // 6 MiB: three units
	src, _ := devdaxSource(t)                 // three units of data
	fi := hashOf(t, src)
	one, _ := memFile(t, 1024, []uint64{3})
	bad := hashOf(t, one)
	bad.SHA256 = strings.Repeat("0", 64)
	if _, err := s.Put("snap-bad", one, bad); err == nil || !strings.Contains(err.Error(), "does not match") {
		t.Fatalf("mismatch: %v", err)
	}
	// Four units have data to SEEK_DATA (one of them zeros): more than
	// the device has.
	if _, err := s.Put("snap-big", src, fi); !errors.Is(err, ErrFull) {
		t.Fatalf("put on a full device: %v", err)
	}
	if in, _ := s.Info(); in.FreeBytes != 6<<20 || len(in.Entries) != 0 {
		t.Fatalf("a failed put kept something: %+v", in)
	}
	e, err := s.Put("snap-one", one, hashOf(t, one))
	if err != nil || e.Bytes != testAlign {
		t.Fatalf("put one unit: %+v %v", e, err)
	}
	for _, vm := range []string{"vm-1", "vm-2"} {
		cloneT(t, s, "snap-one", vm)
	}
	if _, err := devOf(s).clone("snap-one", "vm-3"); !errors.Is(err, ErrFull) || !strings.Contains(err.Error(), "2 live clones") {
		t.Fatalf("clone on a full device: %v", err)
	}
	if got := s.Clones(); len(got) != 2 {
		t.Fatalf("a refused clone kept a range: %v", got)
	}
}

// A stored copy damaged on the device fails verification.
func TestDevDAXRegionVerifyDetectsDamage(t *testing.T) {
	path := regionFile(t, 16<<20)
	s := openRegionT(t, path)
	src, _ := devdaxSource(t)
	e, err := s.Put("snap-d", src, hashOf(t, src))
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, _ := os.OpenFile(path, os.O_RDWR, 0)
	f.WriteAt([]byte{0x42}, e.DeviceOffset+12345)
	f.Close()
	s = openRegionT(t, path)
	e, _ = s.Get("snap-d")
	if err := s.Verify(e); err == nil || !strings.Contains(err.Error(), "damaged") {
		t.Fatalf("damaged copy: %v", err)
	}
}

// Open recognizes a device-DAX character device by its sysfs subsystem and
// takes its size and alignment from there. A stand-in sysfs entry for
// /dev/null (a character device that cannot be mapped) shows the
// classification and the mapping's error.
func TestOpenClassifiesDevDAX(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/dev/null", &st); err != nil {
		t.Skipf("no /dev/null to stand in for a character device: %v", err)
	}
	sys := t.TempDir()
	old := daxSysfs
	daxSysfs = sys
	t.Cleanup(func() { daxSysfs = old })
	dir := filepath.Join(sys, "1:3")
	os.MkdirAll(filepath.Join(sys, "class", "dax"), 0o755)
	os.MkdirAll(dir, 0o755)
	os.Symlink(filepath.Join(sys, "class", "dax"), filepath.Join(dir, "subsystem"))
	os.WriteFile(filepath.Join(dir, "size"), []byte("134217728\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "align"), []byte("2097152\n"), 0o644)
	if p, ok := isDAXDevice("/dev/null"); !ok || p != dir {
		t.Fatalf("not classified as device-DAX: %q %v", p, ok)
	}
	if _, err := Open("/dev/null"); err == nil || !strings.Contains(err.Error(), "mapping 128 MiB") {
		t.Fatalf("open: %v", err)
	}
	if _, err := Open("/dev/dax9.9"); !errors.Is(err, ErrUnsupported) {
		t.Fatalf("missing device: %v", err)
	}
}

// devOf is a device store's device.
func devOf(s *Store) *daxDevice { return s.t.(*daxDevice) }

// cloneT gives vm a clone range of snap's copy on s's device.
func cloneT(t *testing.T, s *Store, snap, vm string) *Clone {
	t.Helper()
	c, err := devOf(s).clone(snap, vm)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
