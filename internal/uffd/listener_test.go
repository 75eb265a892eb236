package uffd

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary act as the shim in a separate process
// (TestShimProcess).
func TestMain(m *testing.M) {
	if sock := os.Getenv("THAW_UFFD_TEST_SHIM"); sock != "" {
		os.Exit(runShimProcess(sock))
	}
	os.Exit(m.Run())
}

// shimResult is what a stand-in shim observed.
type shimResult struct {
	acked bool
	err   error
}

// shimSend connects to path, sends msg with fds attached (split into two
// writes when split > 0, the fds going with the first) and waits for the ack.
func shimSend(path string, msg []byte, fds []int, split int) shimResult {
	return shimSendOpt(path, msg, fds, split, false)
}

// shimSendOpt is shimSend that can also shut down its write side after the
// message (a shim that sent a short message and gave up).
func shimSendOpt(path string, msg []byte, fds []int, split int, closeWrite bool) shimResult {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return shimResult{err: err}
	}
	defer c.Close()
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	first := msg
	if split > 0 {
		first = msg[:split]
	}
	if _, _, err := c.WriteMsgUnix(first, oob, nil); err != nil {
		return shimResult{err: err}
	}
	if split > 0 {
		time.Sleep(5 * time.Millisecond)
		if _, err := c.Write(msg[split:]); err != nil {
			return shimResult{err: err}
		}
	}
	if closeWrite {
		c.CloseWrite()
	}
	c.SetReadDeadline(time.Now().Add(testTimeout))
	var b [1]byte
	n, err := c.Read(b[:])
	if n == 1 && b[0] == ackByte {
		return shimResult{acked: true}
	}
	if err == io.EOF {
		err = nil // closed without ack: rejected
	}
	return shimResult{err: err}
}

func listenTest(t *testing.T) *Listener {
	t.Helper()
	l, err := Listen(filepath.Join(t.TempDir(), "uffd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func acceptTimeout(t *testing.T, l *Listener) (*Mapping, error) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	return l.Accept(ctx)
}

// (d) The handshake with a real userfaultfd, then serving through the
// received descriptor.
func TestHandshake(t *testing.T) {
	for _, split := range []int{0, 11} {
		t.Run("split"+strconv.Itoa(split), func(t *testing.T) {
			l := listenTest(t)
			mf := newMemFile(t, 64, 64, 20)
			tr := newTestRegion(t, 64, 0, false)

			resc := make(chan shimResult, 1)
			go func() {
				resc <- shimSend(l.Path(), encodeHandshake(tr.Addr, tr.Length, PageSize, uint32(os.Getpid())), []int{tr.FD}, split)
			}()
			r, err := acceptTimeout(t, l)
			if err != nil {
				t.Fatalf("Accept: %v", err)
			}
			defer r.Close()
			if r.Addr != tr.Addr || r.Length != tr.Length || r.PID != os.Getpid() || r.PeerPID != os.Getpid() {
				t.Errorf("region %+v, want addr %#x length %#x pid %d", r, tr.Addr, tr.Length, os.Getpid())
			}
			if r.FD == tr.FD || !isUserfaultfd(r.FD) {
				t.Errorf("received fd %d (sent %d) is not a new userfaultfd", r.FD, tr.FD)
			}
			if fl, _ := unix.FcntlInt(uintptr(r.FD), unix.F_GETFD, 0); fl&unix.FD_CLOEXEC == 0 {
				t.Errorf("received fd is not close-on-exec")
			}
			select {
			case res := <-resc:
				t.Fatalf("shim finished before the ack: %+v", res)
			case <-time.After(20 * time.Millisecond):
			}

			s := newServer(t, r, mf, Options{})
			ws := []uint64{0, 1, 2, 3}
			prefetch(t, s, mf, ws)
			if err := r.Ack(); err != nil {
				t.Fatalf("Ack: %v", err)
			}
			if res := <-resc; !res.acked || res.err != nil {
				t.Fatalf("shim: %+v, want acked", res)
			}
			if err := r.Ack(); err == nil {
				t.Error("second Ack succeeded")
			}
			stop := startServe(t, s)
			touchPages(t, tr, mf.want, allPages(64), 2, nil)
			checkContents(t, tr, mf.want)
			stop()
			if st := s.Stats(); st.Served != 60 || st.PrefetchPages != 4 {
				t.Errorf("served %d prefetched %d, want 60 and 4", st.Served, st.PrefetchPages)
			}
		})
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// Accept rejects malformed messages (closing the connection without an ack
// and every received descriptor) and keeps accepting.
func TestHandshakeRejects(t *testing.T) {
	l := listenTest(t)
	tr := newTestRegion(t, 16, 0, false)
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pipe[0])
	defer unix.Close(pipe[1])
	good := func() []byte { return encodeHandshake(tr.Addr, tr.Length, PageSize, uint32(os.Getpid())) }
	bad := func(f func(b []byte)) []byte { b := good(); f(b); return b }
	put64 := func(b []byte, off int, v uint64) {
		for i := 0; i < 8; i++ {
			b[off+i] = byte(v >> (8 * i))
		}
	}
	cases := []struct {
		name string
		msg  []byte
		fds  []int
		want string
	}{
		{"bad magic", bad(func(b []byte) { copy(b, "THAWUFD2") }), []int{tr.FD}, "magic"},
		{"page size", bad(func(b []byte) { b[24], b[25] = 0, 0x20 }), []int{tr.FD}, "page size"},
		{"zero length", bad(func(b []byte) { put64(b, 16, 0) }), []int{tr.FD}, "length"},
		{"unaligned length", bad(func(b []byte) { put64(b, 16, tr.Length+100) }), []int{tr.FD}, "length"},
		{"unaligned addr", bad(func(b []byte) { put64(b, 8, tr.Addr+8) }), []int{tr.FD}, "aligned"},
		{"overflow", bad(func(b []byte) { put64(b, 8, 1<<63); put64(b, 16, 1<<63) }), []int{tr.FD}, "overflow"},
		{"no fd", good(), nil, "descriptors"},
		{"two fds", good(), []int{tr.FD, pipe[0]}, "descriptors"},
		{"not a uffd", good(), []int{pipe[0]}, "not a userfaultfd"},
		{"short", good()[:20], []int{tr.FD}, "receive"},
	}
	before := openFDs(t)
	for _, c := range cases {
		resc := make(chan shimResult, 1)
		go func() { resc <- shimSendOpt(l.Path(), c.msg, c.fds, 0, c.name == "short") }()
		r, err := acceptTimeout(t, l)
		if err == nil {
			r.Close()
			t.Errorf("%s: Accept succeeded", c.name)
			continue
		}
		if !errors.Is(err, ErrHandshake) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Accept error %q, want ErrHandshake mentioning %q", c.name, err, c.want)
		}
		if res := <-resc; res.acked {
			t.Errorf("%s: shim got an ack", c.name)
		}
	}
	if after := openFDs(t); after != before {
		t.Errorf("open descriptors %d -> %d: received fds leaked", before, after)
	}

	// The listener still works.
	resc := make(chan shimResult, 1)
	go func() { resc <- shimSend(l.Path(), good(), []int{tr.FD}, 0) }()
	r, err := acceptTimeout(t, l)
	if err != nil {
		t.Fatalf("Accept after rejects: %v", err)
	}
	defer r.Close()
	if err := r.Ack(); err != nil {
		t.Fatal(err)
	}
	if res := <-resc; !res.acked {
		t.Fatalf("shim: %+v", res)
	}
}

func TestParseHandshake(t *testing.T) {
	if _, err := parseHandshake(make([]byte, 31), nil); !errors.Is(err, ErrHandshake) {
		t.Errorf("short message: %v", err)
	}
}

// Accept returns ctx.Err() and leaves the listener usable.
func TestAcceptContext(t *testing.T) {
	l := listenTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := l.Accept(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept: %v, want DeadlineExceeded", err)
	}
	// A connection that never sends anything is bounded by ctx too.
	c, err := net.Dial("unix", l.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx2, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, err := l.Accept(ctx2); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Accept of a silent peer: %v, want DeadlineExceeded", err)
	}
	tr := newTestRegion(t, 4, 0, false)
	resc := make(chan shimResult, 1)
	go func() {
		resc <- shimSend(l.Path(), encodeHandshake(tr.Addr, tr.Length, PageSize, 1), []int{tr.FD}, 0)
	}()
	r, err := acceptTimeout(t, l)
	if err != nil {
		t.Fatalf("Accept after a cancelled Accept: %v", err)
	}
	r.Close()
	<-resc
}

func TestListenStaleSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "s.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Listen(path); err == nil {
		t.Fatal("Listen took over a live socket")
	}
	ln.SetUnlinkOnClose(false)
	ln.Close()
	l, err := Listen(path)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket not removed on Close: %v", err)
	}
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	if _, err := Listen(file); err == nil {
		t.Error("Listen replaced a regular file")
	}
}

// The real topology: the "shim" is another process (this test binary
// re-executed) that maps, registers, sends its uffd and waits for the ack,
// then reads its whole region and prints its SHA-256. The daemon side
// prefetches, acks, serves, and notices the process's exit by itself.
func TestShimProcess(t *testing.T) {
	const pages = 1040
	mf := newMemFile(t, 1000, pages, 21)
	l := listenTest(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "THAW_UFFD_TEST_SHIM="+l.Path(), "THAW_UFFD_TEST_PAGES="+strconv.Itoa(pages))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitc := make(chan error, 1)
	go func() { waitc <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-waitc
	})

	r, err := acceptTimeout(t, l)
	if err != nil {
		t.Fatalf("Accept: %v (child stderr: %s)", err, stderr.String())
	}
	defer r.Close()
	if r.PID != cmd.Process.Pid || r.PeerPID != cmd.Process.Pid {
		t.Errorf("pid %d peer %d, want %d", r.PID, r.PeerPID, cmd.Process.Pid)
	}
	s := newServer(t, r, mf, Options{Record: true})
	ws := make([]uint64, 0, 300)
	for p := uint64(0); p < pages; p += 3 {
		ws = append(ws, p)
	}
	prefetch(t, s, mf, ws)
	if err := r.Ack(); err != nil {
		t.Fatal(err)
	}
	servec := make(chan error, 1)
	go func() { servec <- s.Serve(context.Background()) }()
	err = within(t, waitc, "shim process did not finish")
	waitc <- err
	if err != nil {
		t.Fatalf("shim process: %v\n%s", err, stderr.String())
	}
	if err := within(t, servec, "Serve did not notice the process exit"); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	sum := sha256.Sum256(mf.want)
	if got := strings.TrimSpace(stdout.String()); got != hex.EncodeToString(sum[:]) {
		t.Fatalf("shim read %s, want %x", got, sum)
	}
	st := s.Stats()
	if want := uint64(pages - len(ws)); st.Served != want || uint64(len(s.RecordedPages())) != want {
		t.Errorf("served %d recorded %d, want %d", st.Served, len(s.RecordedPages()), want)
	}
	// After the exit the mm is gone: UFFDIO_COPY fails with ESRCH (or ENOENT
	// on kernels that look the VMA up first).
	_, err = uffdCopy(r.FD, r.Addr, uint64(uintptr(unsafe.Pointer(&s.page[0]))), PageSize, 0)
	t.Logf("cross-process: prefetched %d, served %d in %v; UFFDIO_COPY after exit: %v",
		st.PrefetchPages, st.Served, st.ServeTime, err)
	if !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		t.Errorf("UFFDIO_COPY after exit: %v, want ESRCH or ENOENT", err)
	}
}

// runShimProcess is the child side of TestShimProcess.
func runShimProcess(sock string) int {
	fail := func(f string, a ...any) int {
		fmt.Fprintf(os.Stderr, "shim: "+f+"\n", a...)
		return 1
	}
	pages, _ := strconv.Atoi(os.Getenv("THAW_UFFD_TEST_PAGES"))
	mem, err := unix.Mmap(-1, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return fail("mmap: %v", err)
	}
	fd, err := newUserfaultfd(0)
	if err != nil {
		return fail("userfaultfd: %v", err)
	}
	addr := uint64(uintptr(unsafe.Pointer(&mem[0])))
	if _, err := register(fd, addr, uint64(len(mem)), registerModeMissing); err != nil {
		return fail("register: %v", err)
	}
	res := shimSend(sock, encodeHandshake(addr, uint64(len(mem)), PageSize, uint32(os.Getpid())), []int{fd}, 0)
	if !res.acked {
		return fail("no ack: %v", res.err)
	}
	unix.Close(fd) // the daemon holds it now, as in QEMU after the handshake
	var wg sync.WaitGroup
	sinks := make([]byte, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runtime.LockOSThread()
			var sink byte
			for p := w; p < pages; p += 2 {
				sink += mem[p*PageSize]
			}
			sinks[w] = sink
		}()
	}
	wg.Wait()
	sum := sha256.Sum256(mem)
	fmt.Println(hex.EncodeToString(sum[:]))
	return 0
}
