package uffd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// testTimeout bounds every wait in these tests; on expiry the region is
// unregistered (waking every blocked fault) and the test fails.
const testTimeout = 60 * time.Second

// testRegion is an anonymous private mapping of the test process registered
// with a fresh userfaultfd, as the shim does in QEMU.
type testRegion struct {
	*Mapping
	mem []byte
}

// newTestRegion maps pages pages, creates a userfaultfd with the given
// features and registers the mapping in MISSING mode. hugepage asks for THP
// (MADV_HUGEPAGE) before registering.
func newTestRegion(t testing.TB, pages int, features uint64, hugepage bool) *testRegion {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		t.Fatalf("mmap: %v", err)
	}
	if hugepage {
		if err := unix.Madvise(mem, unix.MADV_HUGEPAGE); err != nil {
			t.Logf("madvise(MADV_HUGEPAGE): %v", err)
		}
	}
	fd, err := newUserfaultfd(features)
	if err != nil {
		unix.Munmap(mem)
		t.Skipf("userfaultfd unavailable: %v", err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	ioctls, err := register(fd, addr, uint64(len(mem)), registerModeMissing)
	if err != nil {
		unix.Close(fd)
		unix.Munmap(mem)
		t.Fatalf("UFFDIO_REGISTER: %v", err)
	}
	for _, nr := range []uint{nrWake, nrCopy, nrZeropage} {
		if ioctls&(1<<nr) == 0 {
			t.Fatalf("UFFDIO_REGISTER: ioctls %#x lack bit %d", ioctls, nr)
		}
	}
	r := &testRegion{
		Mapping: &Mapping{Addr: addr, Length: uint64(len(mem)), PID: os.Getpid(), FD: fd},
		mem:     mem,
	}
	t.Cleanup(func() {
		r.Mapping.Close()
		unix.Munmap(mem)
	})
	return r
}

// newUserfaultfd creates a userfaultfd (O_CLOEXEC|O_NONBLOCK) and performs
// the UFFDIO_API handshake with features.
func newUserfaultfd(features uint64) (int, error) {
	fd, _, e := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK, 0, 0)
	if e != 0 {
		return -1, e
	}
	a, err := apiHandshake(int(fd), features)
	if err != nil {
		unix.Close(int(fd))
		return -1, err
	}
	if a.Features&features != features {
		unix.Close(int(fd))
		return -1, errors.New("features not granted")
	}
	return int(fd), nil
}

// unblock unregisters the region so every thread blocked in a fault on it
// resumes (used when a test times out).
func (r *testRegion) unblock() {
	unregister(r.FD, r.Addr, r.Length)
}

// memFile is a synthetic guest memory file and its expected contents over a
// region of regionPages pages (zeros beyond the file).
type memFile struct {
	path        string
	want        []byte
	filePages   int // pages that hold file data (last may be partial)
	regionPages int
}

// newMemFile writes a file of roughly filePages pages: random non-zero pages,
// explicit zero pages and holes, with a partial last page so the size is a
// multiple of neither 1 MiB nor 4 KiB. The region is regionPages long
// (>= filePages) and reads zeros beyond the end of the file.
func newMemFile(t testing.TB, filePages, regionPages int, seed uint64) *memFile {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	size := (filePages-1)*PageSize + 1234
	want := make([]byte, regionPages*PageSize)
	path := filepath.Join(t.TempDir(), "mem")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	for p := 0; p < filePages; p++ {
		kind := rng.IntN(10)
		if p == filePages-1 {
			kind = 9 // the partial last page has data
		}
		switch {
		case kind < 2: // hole
			continue
		case kind < 3: // explicit zeros
			if _, err := f.WriteAt(make([]byte, PageSize), int64(p)*PageSize); err != nil && p != filePages-1 {
				t.Fatal(err)
			}
			continue
		}
		page := want[p*PageSize : (p+1)*PageSize]
		for i := 0; i < PageSize; i += 8 {
			v := rng.Uint64() | 1 // never an all-zero page
			*(*uint64)(unsafe.Pointer(&page[i])) = v
		}
		n := PageSize
		if off := p * PageSize; off+n > size {
			n = size - off
			clear(page[n:])
		}
		if _, err := f.WriteAt(page[:n], int64(p)*PageSize); err != nil {
			t.Fatal(err)
		}
	}
	if fi, _ := f.Stat(); fi.Size() != int64(size) {
		t.Fatalf("memory file is %d bytes, want %d", fi.Size(), size)
	}
	return &memFile{path: path, want: want, filePages: filePages, regionPages: regionPages}
}

// access says how a page is first touched.
type access int

const (
	readAccess  access = iota // user-mode load
	writeAccess               // user-mode store (of the expected byte)
	gupAccess                 // process_vm_readv: a kernel GUP fault, as KVM takes on guest memory
)

// touchPages touches every listed page from workers goroutines, each locked
// to its own OS thread. how picks the kind of access per page (nil: loads).
//
// A goroutine blocked in a user-mode fault keeps its P, and the runtime's
// preemption signal makes the kernel withdraw the fault message before the
// server can read it: with every P held by faulting threads the server never
// gets to run (observed with GOMAXPROCS=1). So GOMAXPROCS is raised to
// workers+2 while touching, leaving Ps for the server and the test.
func touchPages(t testing.TB, r *testRegion, want []byte, pages []uint64, workers int, how func(page uint64) access) time.Duration {
	t.Helper()
	if prev := runtime.GOMAXPROCS(0); prev < workers+2 {
		runtime.GOMAXPROCS(workers + 2)
		defer runtime.GOMAXPROCS(prev)
	}
	var wg sync.WaitGroup
	start := time.Now()
	sinks := make([]byte, workers) // keeps the loads from being optimized away
	errs := make([]error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			var sink byte
			var one [1]byte
			for i := w; i < len(pages); i += workers {
				off := pages[i] * PageSize
				kind := readAccess
				if how != nil {
					kind = how(pages[i])
				}
				switch kind {
				case writeAccess:
					r.mem[off+7] = want[off+7]
				case gupAccess:
					local := []unix.Iovec{{Base: &one[0], Len: 1}}
					remote := []unix.RemoteIovec{{Base: uintptr(r.Addr + off + 3), Len: 1}}
					n, err := unix.ProcessVMReadv(os.Getpid(), local, remote, 0)
					if err != nil || n != 1 {
						errs[w] = fmt.Errorf("process_vm_readv page %d: %d, %v", pages[i], n, err)
						return
					}
					if one[0] != want[off+3] {
						errs[w] = fmt.Errorf("process_vm_readv page %d: byte %d, want %d", pages[i], one[0], want[off+3])
						return
					}
				default:
					sink += r.mem[off]
				}
			}
			sinks[w] = sink
		}(w)
	}
	if !waitTimeout(&wg, testTimeout) {
		r.unblock()
		wg.Wait()
		t.Fatalf("touching %d pages did not finish within %v (server stuck?)", len(pages), testTimeout)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return time.Since(start)
}

func waitTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// checkContents compares every page of the region with the expected bytes.
// It first checks with mincore that every page is present: comparing a
// missing page would fault inside bytes.Equal (assembly, not preemptible)
// and could hang the test instead of failing it.
func checkContents(t testing.TB, r *testRegion, want []byte) {
	t.Helper()
	vec := make([]byte, len(want)/PageSize)
	_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(r.Addr), uintptr(len(want)), uintptr(unsafe.Pointer(&vec[0])))
	if e != 0 {
		t.Fatalf("mincore: %v", e)
	}
	for p, v := range vec {
		if v&1 == 0 {
			t.Fatalf("page %d is not present", p)
		}
	}
	bad := 0
	for p := 0; p < len(want)/PageSize; p++ {
		a, b := r.mem[p*PageSize:(p+1)*PageSize], want[p*PageSize:(p+1)*PageSize]
		if !bytes.Equal(a, b) {
			if bad < 5 {
				t.Errorf("page %d differs from the memory file", p)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d pages differ", bad, len(want)/PageSize)
	}
}

// startServe runs s.Serve in a goroutine and returns a function that stops it
// and returns Serve's result.
func startServe(t testing.TB, s *Server) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-errc:
				if errors.Is(err, context.Canceled) {
					err = nil
				}
			case <-time.After(testTimeout):
				err = errors.New("Serve did not return after cancel")
			}
		})
		return err
	}
	t.Cleanup(func() { stop() })
	return stop
}

// newServer is NewServer(m, mf.path, opts), closed when the test ends.
func newServer(t testing.TB, m *Mapping, mf *memFile, opts Options) *Server {
	t.Helper()
	s, err := NewServer(m, mf.path, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// newSourceServer is NewSourceServer(m, src, opts), closed when the test
// ends.
func newSourceServer(t testing.TB, m *Mapping, src PageSource, opts Options) *Server {
	t.Helper()
	s, err := NewSourceServer(m, src, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// stopChecked checks that r holds want, then stops Serve, which must
// have ended without an error.
func stopChecked(t testing.TB, r *testRegion, want []byte, stop func() error) {
	t.Helper()
	checkContents(t, r, want)
	if err := stop(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// writeWS writes the working-set file of pages of mf in dir (a temporary
// directory if dir is "") and returns its path.
func writeWS(t testing.TB, dir string, mf *memFile, pages []uint64) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	wsFile := filepath.Join(dir, "ws")
	if err := WriteWorkingSet(mf.path, wsFile, pages); err != nil {
		t.Fatal(err)
	}
	return wsFile
}

// prefetch prefetches pages of mf into s from a working-set file written
// for them, failing the test on error.
func prefetch(t testing.TB, s *Server, mf *memFile, pages []uint64) Stats {
	t.Helper()
	st, err := s.Prefetch(writeWS(t, "", mf, pages), pages)
	if err != nil {
		t.Fatalf("Prefetch: %v", err)
	}
	return st
}

// within returns what c delivers, failing the test with failure if
// nothing comes within testTimeout.
func within[T any](t testing.TB, c <-chan T, failure string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(testTimeout):
		t.Fatal(failure)
	}
	var zero T
	return zero
}

func allPages(n int) []uint64 {
	p := make([]uint64, n)
	for i := range p {
		p[i] = uint64(i)
	}
	return p
}

func shuffled(p []uint64, seed uint64) []uint64 {
	q := append([]uint64(nil), p...)
	rng := rand.New(rand.NewPCG(seed, 7))
	rng.Shuffle(len(q), func(i, j int) { q[i], q[j] = q[j], q[i] })
	return q
}

// encodeHandshake builds the shim's message (used by tests and tools that
// stand in for the shim).
func encodeHandshake(addr, length uint64, pageSize, pid uint32) []byte {
	b := make([]byte, handshakeSize)
	copy(b, handshakeMagic)
	binary.LittleEndian.PutUint64(b[8:], addr)
	binary.LittleEndian.PutUint64(b[16:], length)
	binary.LittleEndian.PutUint32(b[24:], pageSize)
	binary.LittleEndian.PutUint32(b[28:], pid)
	return b
}

// WriteWorkingSet writes the REAP working-set file: the contents of the given
// guest pages of memFile, back to back in the given order (pages beyond the
// end of memFile are zeros). Prefetch(wsFile, pages) installs it. Sorting
// pages first lets Prefetch coalesce more UFFDIO_COPY calls; the order of
// installation does not matter because it completes before the VM runs.
func WriteWorkingSet(memFile, wsFile string, pages []uint64) error {
	in, err := os.Open(memFile)
	if err != nil {
		return fmt.Errorf("uffd: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(wsFile, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("uffd: %w", err)
	}
	const chunk = 256 // pages per write
	buf := make([]byte, chunk*PageSize)
	for i := 0; i < len(pages); i += chunk {
		n := min(chunk, len(pages)-i)
		for j := 0; j < n; j++ {
			p := buf[j*PageSize : (j+1)*PageSize]
			m, err := in.ReadAt(p, int64(pages[i+j])*PageSize)
			if err != nil && err != io.EOF {
				out.Close()
				return fmt.Errorf("uffd: read %s page %d: %w", memFile, pages[i+j], err)
			}
			clear(p[m:])
		}
		if _, err := out.Write(buf[:n*PageSize]); err != nil {
			out.Close()
			return fmt.Errorf("uffd: write %s: %w", wsFile, err)
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return fmt.Errorf("uffd: %w", err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("uffd: %w", err)
	}
	return nil
}

// ioc computes _IOC(dir, typ, nr, size) for x86_64 (used by the tests).
func ioc(dir, typ, nr, size uintptr) uintptr {
	return dir<<30 | size<<16 | typ<<8 | nr
}

// apiHandshake performs UFFDIO_API with the requested features and returns
// the features and ioctls the kernel reports.
func apiHandshake(fd int, features uint64) (uffdioAPI, error) {
	a := uffdioAPI{API: uffdAPI, Features: features}
	err := ioctlPtr(fd, ioctlAPI, unsafe.Pointer(&a))
	return a, err
}

// register registers [start, start+n) with the given modes and returns the
// bitmask of range ioctls the kernel allows on it.
func register(fd int, start, n, mode uint64) (uint64, error) {
	r := uffdioRegister{Range: uffdioRange{Start: start, Len: n}, Mode: mode}
	err := ioctlPtr(fd, ioctlRegister, unsafe.Pointer(&r))
	return r.Ioctls, err
}

// unregister unregisters [start, start+n), waking every blocked fault in it.
func unregister(fd int, start, n uint64) error {
	r := uffdioRange{Start: start, Len: n}
	return ioctlPtr(fd, ioctlUnregister, unsafe.Pointer(&r))
}
