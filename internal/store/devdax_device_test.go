package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// TestDevDAX runs where THAW_DEVDAX names a real device-DAX character
// device. No host of ours has persistent memory, so scripts/dax-guest.sh
// boots a guest whose kernel turns part of its RAM into a pmem namespace,
// reconfigures it as device-DAX (/dev/dax0.0, 2 MiB alignment) and runs
// this test there, on the kernel's drivers/dax code:
//   - Open classifies the device from sysfs (size, alignment) and formats
//     its index; a copy is stored in whole units and verifies;
//   - the kernel refuses a private mapping and an unaligned one (why thaw
//     gives each VM a range, and starts QEMU with align=);
//   - a clone range mapped the way the interposer maps it (shared, fixed,
//     on an aligned address, MADV_POPULATE_WRITE) reads the snapshot, and
//     the guest's writes stay in it;
//   - with THAW_DEVDAX_CHROOT, the real interposer inside thaw-shim-check
//     (which maps like QEMU) builds that mapping from a layout table;
//   - the index survives closing and reopening the device.
func TestDevDAX(t *testing.T) {
	dev := envPath(t, "THAW_DEVDAX", "no device-DAX device here (scripts/dax-guest.sh devdax runs this in a guest with one)")
	s := openKind(t, dev, DevDAX, 2<<20)
	defer func() { s.Close() }()
	in, err := s.Info()
	if err != nil || in.CapacityBytes <= 0 || in.FreeBytes != in.CapacityBytes || s.Notice() != "" {
		t.Fatalf("fresh device: %+v %v %q", in, err, s.Notice())
	}
	t.Logf("%s: %d MiB usable, %d KiB alignment", dev, in.CapacityBytes>>20, s.PageSize()>>10)

	work := t.TempDir()
	if root := os.Getenv("THAW_DEVDAX_CHROOT"); root != "" {
		work = filepath.Join(root, os.Getenv("THAW_DEVDAX_SHIM_DIR"), "snap")
		if err := os.MkdirAll(work, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	src, e := putDevDAXSnapshot(t, s, dev, work)

	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const unit = 2 << 20
	if m, err := unix.Mmap(int(f.Fd()), 0, unit, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE); !errors.Is(err, unix.EINVAL) {
		if err == nil {
			unix.Munmap(m)
		}
		t.Fatalf("a private mapping of device-DAX: %v, want EINVAL (the kernel maps it only shared)", err)
	}

	checkCloneRanges(t, s, f, e, src)

	if root := os.Getenv("THAW_DEVDAX_CHROOT"); root != "" {
		runShimOnDevice(t, s, dev, root, e, src)
	}

	s = checkDevDAXReopens(t, s, dev, e)
}

// putDevDAXSnapshot stores 16 MiB of guest memory whose units 0, 1, 3 and
// 6 hold data, written in work, and checks the entry; it returns the memory
// and the entry.
func putDevDAXSnapshot(t *testing.T, s *Store, dev, work string) ([]byte, *Entry) {
	t.Helper()
	const unit = 2 << 20
	mem := filepath.Join(work, "memory")
	src := make([]byte, 8*unit)
	for i, u := range []int{0, 1, 3, 6} {
		for p := u * unit; p < (u+1)*unit; p += 4096 {
			copy(src[p:], fmt.Sprintf("unit %d page %d ", u, p/4096))
			src[p+4095] = byte(i + 1)
		}
	}
	if err := os.WriteFile(mem, src, 0o600); err != nil {
		t.Fatal(err)
	}
	fi, err := snapshot.HashFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Put("snap-devdax", mem, fi)
	if err != nil {
		t.Fatal(err)
	}
	if e.Bytes != 4*unit || e.Regions != 3 || e.Path != dev {
		t.Fatalf("entry %+v: want four units in three regions", e)
	}
	if err := s.Verify(e); err != nil {
		t.Fatal(err)
	}
	return src, e
}

// checkCloneRanges maps two clones of e's copy the way the interposer does
// (reserve, then shared fixed mappings of the device f at aligned addresses,
// populated writable) and checks they read src and that a guest's writes
// reach neither the stored copy nor the other clone.
func checkCloneRanges(t *testing.T, s *Store, f *os.File, e *Entry, src []byte) {
	t.Helper()
	const unit = 2 << 20
	c := cloneT(t, s, "snap-devdax", "vm-000000000001")
	other := cloneT(t, s, "snap-devdax", "vm-000000000002")
	t.Logf("clone ranges at %d and %d MiB, %d MiB each, filled in %.2f and %.2f ms", c.Offset>>20, other.Offset>>20, c.Bytes>>20, c.CopyMS, other.CopyMS)

	// Map the clone as the interposer does: reserve, then shared fixed
	// mappings of the device at aligned addresses, populated writable.
	resv, err := unix.Mmap(-1, 0, len(src)+unit, unix.PROT_NONE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(resv)
	start := uintptr(unsafe.Pointer(&resv[0]))
	skip := int((start+unit-1)&^(unit-1) - start)
	guest := resv[skip : skip+len(src)]
	base := uintptr(unsafe.Pointer(&guest[0]))
	if _, err := mmapFixed(base, len(src), -1, 0, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE); err != nil {
		t.Fatal(err)
	}
	if _, err := mmapFixed(base+4096, unit, int(f.Fd()), 0, unix.MAP_SHARED); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("an unaligned device mapping: %v, want EINVAL (QEMU must place guest RAM on the alignment)", err)
	}
	for _, m := range c.Maps {
		if _, err := mmapFixed(base+uintptr(m.GuestOff), int(m.Length), int(f.Fd()), int64(m.DeviceOff), unix.MAP_SHARED); err != nil {
			t.Fatalf("map %+v: %v", m, err)
		}
		if err := unix.Madvise(guest[m.GuestOff:m.GuestOff+m.Length], 23 /* MADV_POPULATE_WRITE */); err != nil {
			t.Fatalf("MADV_POPULATE_WRITE over device-DAX: %v", err)
		}
	}
	if !bytes.Equal(guest, src) {
		t.Fatal("the clone's mapping does not read the snapshot's memory")
	}
	for p := 0; p < len(guest); p += 4096 * 7 {
		guest[p] ^= 0xff // the guest writes, into its range and into anonymous memory
	}
	devOf(s).mu.Lock()
	devOf(s).verified = map[string]bool{}
	devOf(s).mu.Unlock()
	if err := s.Verify(e); err != nil {
		t.Fatalf("the guest's writes reached the stored copy: %v", err)
	}
	img := make([]byte, len(src))
	for _, m := range other.Maps {
		copy(img[m.GuestOff:], devOf(s).mem[m.DeviceOff:m.DeviceOff+m.Length])
	}
	if !bytes.Equal(img, src) {
		t.Fatal("one clone's writes reached another clone's range")
	}
	devOf(s).release(c.Owner)
	devOf(s).release(other.Owner)

}

// checkDevDAXReopens closes s and checks that the index is on the device:
// the reopened store, which it returns, has e's copy, then removes it.
func checkDevDAXReopens(t *testing.T, s *Store, dev string, e *Entry) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	e2, err := s.Get("snap-devdax")
	if err != nil || e2.DeviceOffset != e.DeviceOffset {
		t.Fatalf("after reopening: %+v %v", e2, err)
	}
	if err := s.Verify(e2); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
	if err := s.Remove("snap-devdax"); err != nil {
		t.Fatal(err)
	}
	if in, _ := s.Info(); in.FreeBytes != in.CapacityBytes {
		t.Fatalf("after removing the copy: %+v", in)
	}
	return s
}

func mmapFixed(addr uintptr, length, fd int, off int64, flags int) (uintptr, error) {
	r, _, errno := unix.Syscall6(unix.SYS_MMAP, addr, uintptr(length), unix.PROT_READ|unix.PROT_WRITE,
		uintptr(flags|unix.MAP_FIXED), uintptr(fd), uintptr(off))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// runShimOnDevice has the real interposer lay a clone out over the device
// inside thaw-shim-check, which maps the memory file as QEMU does (here
// with align=2 MiB), reads every page back and writes every 7th.
func runShimOnDevice(t *testing.T, s *Store, dev, root string, e *Entry, src []byte) {
	shimDir := os.Getenv("THAW_DEVDAX_SHIM_DIR")
	c := cloneT(t, s, e.Snapshot, "vm-00000000000a")
	defer devOf(s).release(c.Owner)
	tab := memlayout.ShimTable{MemSize: uint64(e.Size)}
	for _, m := range c.Maps {
		tab.Entries = append(tab.Entries, memlayout.ShimEntry{GuestOff: m.GuestOff, Length: m.Length, FileOff: m.DeviceOff, Kind: memlayout.ShimDevice})
	}
	b, err := tab.Encode()
	if err != nil {
		t.Fatal(err)
	}
	in := func(p string) string { return filepath.Join(shimDir, "snap", p) } // inside the chroot
	if err := os.WriteFile(filepath.Join(root, in("layout.bin")), b, 0o600); err != nil {
		t.Fatal(err)
	}
	before := append([]byte(nil), devOf(s).mem[c.Offset:c.Offset+c.Bytes]...)
	cmd := exec.Command("/bin/chroot", root, filepath.Join(shimDir, "thaw-shim-check"), "--align", "2097152", "--write-check", "--threads", "2", in("memory"))
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LD_PRELOAD=" + filepath.Join(shimDir, "libthaw_shim.so"),
		"THAW_SHIM_MODE=layout", "THAW_SHIM_MEMFILE=" + in("memory"), "THAW_SHIM_LAYOUT=" + in("layout.bin"),
		"THAW_SHIM_DEVICE=" + dev, "THAW_SHIM_POPULATE=read", "THAW_SHIM_PROTECT=1"}
	out, err := cmd.CombinedOutput()
	t.Logf("thaw-shim-check on %s: %s", dev, strings.TrimSpace(string(out)))
	if err != nil || !strings.Contains(string(out), `"mismatches":0`) || !strings.Contains(string(out), "3 device") {
		t.Fatalf("the interposer's device layout on %s: %v", dev, err)
	}
	if bytes.Equal(before, devOf(s).mem[c.Offset:c.Offset+c.Bytes]) {
		t.Fatal("the checker's writes did not reach the VM's range of the device")
	}
	if got, _ := os.ReadFile(filepath.Join(root, in("memory"))); !bytes.Equal(got, src) {
		t.Fatal("the checker's writes reached the memory file")
	}
}
