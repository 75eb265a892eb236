package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/bench"
)

// The emulated remote volume of `make bench STORAGE=remote`, built by the
// real script: every read that misses ext4's page cache (after an eviction,
// or O_DIRECT) pays the volume's latency, a cached one does not, readahead
// is the loop device's, and `down` leaves nothing behind.
func TestRemoteStorageVolume(t *testing.T) {
	parallel(t)
	skipWithoutRemoteVolume(t)
	mnt, state, loop, down := remoteVolumeUp(t)
	if ra, err := bench.ReadaheadOf(mnt); err != nil || ra.KB() <= 0 {
		t.Fatalf("readahead of the volume: %v", err)
	}

	path := filepath.Join(mnt, "mem")
	data := make([]byte, 4<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	// Files are closed before `down` (cleanups run last in, first out).
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	evict := func() {
		if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
			t.Fatal(err)
		}
	}
	read := func(off int64) time.Duration {
		buf := make([]byte, 4096)
		start := time.Now()
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if string(buf) != string(data[off:off+4096]) {
			t.Fatalf("wrong bytes at %d", off)
		}
		return took
	}
	evict()
	if cold := read(1 << 20); cold < 2*time.Millisecond {
		t.Errorf("a read after eviction took %s, less than the volume's 2 ms", cold)
	}
	if hot := read(1 << 20); hot >= 2*time.Millisecond {
		t.Errorf("a cached read took %s: the page cache did not answer", hot)
	}
	direct := checkDirectRead(t, path, data)
	f.Close()
	direct.Close()
	down()
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("state %s left after down: %v", state, err)
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	if strings.Contains(string(mounts), mnt) || strings.Contains(string(mounts), state) {
		t.Errorf("still mounted after down")
	}
	if out, _ := exec.Command("losetup", "-j", filepath.Join(state, "fuse", "disk.img")).Output(); len(out) > 0 {
		t.Errorf("loop device %s still attached: %s", strings.TrimSpace(string(loop)), out)
	}
}

// skipWithoutRemoteVolume skips unless the volume can be built here: root,
// FUSE, thaw built, losetup and mkfs.ext4.
func skipWithoutRemoteVolume(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE, loop device, mount)")
	}
	for _, p := range []string{"/dev/fuse", repoPath("bin/thaw")} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s: %v (make build)", p, err)
		}
	}
	for _, tool := range []string{"losetup", "mkfs.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
}

// remoteVolumeUp brings the volume up with a 2 ms latency (down at the
// end of the test at the latest) and returns its mount point, its state
// directory, its loop device and the function that takes it down.
func remoteVolumeUp(t *testing.T) (mnt, state string, loop []byte, down func()) {
	t.Helper()
	mnt = t.TempDir()
	state = filepath.Join(t.TempDir(), "volume")
	script := repoPath("scripts/remote-storage.sh")
	up := exec.Command(script, "up", mnt, state)
	up.Env = append(os.Environ(), "REMOTE_LATENCY=2ms", "REMOTE_DISK_GIB=1")
	if out, err := up.CombinedOutput(); err != nil {
		t.Fatalf("up: %v\n%s", err, out)
	}
	downed := false
	down = func() {
		if downed {
			return
		}
		downed = true
		if out, err := exec.Command(script, "down", state).CombinedOutput(); err != nil {
			t.Errorf("down: %v\n%s", err, out)
		}
	}
	t.Cleanup(down)
	loop, err := os.ReadFile(filepath.Join(state, "loop"))
	if err != nil {
		t.Fatal(err)
	}
	return mnt, state, loop, down
}

// checkDirectRead: O_DIRECT (REAP's working-set read) goes to the volume
// even when cached. It returns the file, closed at the end of the test.
func checkDirectRead(t *testing.T, path string, data []byte) *os.File {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	direct := os.NewFile(uintptr(fd), path)
	t.Cleanup(func() { direct.Close() })
	mem, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if uintptr(unsafe.Pointer(&mem[0]))%4096 != 0 {
		t.Fatal("unaligned buffer")
	}
	start := time.Now()
	if n, err := unix.Pread(fd, mem, 1<<20); err != nil || n != len(mem) {
		t.Fatalf("O_DIRECT read: %d, %v", n, err)
	}
	if took := time.Since(start); took < 2*time.Millisecond {
		t.Errorf("an O_DIRECT read of cached data took %s: it did not reach the volume", took)
	}
	if string(mem) != string(data[1<<20:2<<20]) {
		t.Fatal("O_DIRECT read wrong bytes")
	}
	return direct
}
