package uffd

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fileSource is a PageSource over a memory file that counts what it is
// asked for, optionally sleeping per call and failing from a given offset.
type fileSource struct {
	f       *os.File
	size    int64
	delay   time.Duration
	failAt  int64 // ReadAt at or beyond this offset fails; <0 never
	calls   atomic.Uint64
	bytes   atomic.Uint64
	mu      sync.Mutex
	offsets map[int64]int
}

var sourceSink byte // keeps loads from being optimized away

var errSourceDown = errors.New("object store unreachable")

func newFileSource(t testing.TB, path string) *fileSource {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	return &fileSource{f: f, size: st.Size(), failAt: -1, offsets: map[int64]int{}}
}

func (s *fileSource) Size() int64 { return s.size }
func (s *fileSource) ReadAt(p []byte, off int64) (int, error) {
	s.calls.Add(1)
	s.mu.Lock()
	s.offsets[off]++
	s.mu.Unlock()
	time.Sleep(s.delay)
	if s.failAt >= 0 && off >= s.failAt {
		return 0, errSourceDown
	}
	n, err := s.f.ReadAt(p, off)
	s.bytes.Add(uint64(n))
	return n, err
}

// Serve from a PageSource: every page matches the file, the source is read
// once per page inside the file and never for pages beyond it, and the
// source counters say so.
func TestSourceServe(t *testing.T) {
	mf := newMemFile(t, testFilePages, testRegionPages, 21)
	src := newFileSource(t, mf.path)
	src.delay = 20 * time.Microsecond
	r := newTestRegion(t, testRegionPages, 0, false)
	s := newSourceServer(t, r.Mapping, src, Options{})
	stop := startServe(t, s)
	touchPages(t, r, mf.want, shuffled(allPages(testRegionPages), 3), 4, func(p uint64) access {
		if p%5 == 0 {
			return writeAccess
		}
		return readAccess
	})
	stopChecked(t, r, mf.want, stop)
	st := s.Stats()
	if st.Served != testRegionPages || st.SourceReads != testFilePages || st.SourceReads != src.calls.Load() {
		t.Errorf("served %d, source reads %d (source saw %d), want %d and %d", st.Served, st.SourceReads, src.calls.Load(), testRegionPages, testFilePages)
	}
	if st.SourceBytes != src.bytes.Load() || st.SourceBytes != uint64(src.size) || st.BytesRead != st.SourceBytes {
		t.Errorf("source bytes %d, bytes read %d, source returned %d, file %d", st.SourceBytes, st.BytesRead, src.bytes.Load(), src.size)
	}
	if st.SourceReadTime < time.Duration(st.SourceReads)*src.delay {
		t.Errorf("source read time %v below %d reads of %v", st.SourceReadTime, st.SourceReads, src.delay)
	}
	for off, n := range src.offsets {
		if n != 1 || off%PageSize != 0 {
			t.Fatalf("source read at %d %d times", off, n)
		}
	}
}

// A file-backed server keeps its own path: no source counters.
func TestFileServerNoSourceCounters(t *testing.T) {
	mf := newMemFile(t, 64, 64, 22)
	r := newTestRegion(t, 64, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	stop := startServe(t, s)
	touchPages(t, r, mf.want, allPages(64), 2, nil)
	checkContents(t, r, mf.want)
	stop()
	if st := s.Stats(); st.SourceReads != 0 || st.SourceBytes != 0 || st.BytesRead == 0 {
		t.Errorf("stats %+v", st)
	}
}

// A source that fails ends Serve with an error naming it: the caller can
// then kill the process instead of leaving it blocked.
func TestSourceError(t *testing.T) {
	mf := newMemFile(t, 64, 64, 23)
	src := newFileSource(t, mf.path)
	src.failAt = 32 * PageSize
	r := newTestRegion(t, 64, 0, false)
	s := newSourceServer(t, r.Mapping, src, Options{})
	err := serveUntilFailure(t, s, r, 0, 64)
	if !errors.Is(err, errSourceDown) || !strings.Contains(err.Error(), "read memory source at 0x20000") {
		t.Fatalf("Serve: %v", err)
	}
	if st := s.Stats(); st.Served != 32 {
		t.Errorf("served %d pages before the failure, want 32", st.Served)
	}
}

// serveUntilFailure serves s while a thread reads pages [from, to) of r in
// order, and returns Serve's error once it ends (the thread left waiting
// is released).
func serveUntilFailure(t *testing.T, s *Server, r *testRegion, from, to int) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	if prev := runtime.GOMAXPROCS(0); prev < 4 { // see touchPages
		runtime.GOMAXPROCS(4)
		defer runtime.GOMAXPROCS(prev)
	}
	touched := make(chan struct{})
	go func() {
		defer close(touched)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var sink byte
		for p := from; p < to; p++ {
			sink += r.mem[p*PageSize]
		}
		sourceSink = sink
	}()
	err := within(t, errc, "Serve did not return after the source failed")
	r.unblock() // the faulting thread waits for a page nobody will serve
	<-touched
	return err
}

func TestNewSourceServerValidation(t *testing.T) {
	r := newTestRegion(t, 4, 0, false)
	if _, err := NewSourceServer(r.Mapping, nil, Options{}); err == nil {
		t.Error("nil source accepted")
	}
	if _, err := NewSourceServer(&Mapping{FD: r.FD, Addr: r.Addr + 1, Length: PageSize}, newFileSource(t, newMemFile(t, 4, 4, 1).path), Options{}); err == nil {
		t.Error("unaligned region accepted")
	}
}

// Load installs a loading set while threads fault every page: the
// contents match, each loading-set page is installed once (by Load or by
// a fault), and pages Load installed are not read from the source.
func TestLoadConcurrent(t *testing.T) {
	const pages = 2048
	mf := newMemFile(t, pages, pages, 24)
	// A loading set of three runs, out of guest order, in a compact file.
	runs := []FileRun{{Page: 1500, Pages: 300}, {Page: 10, Pages: 700}, {Page: 900, Pages: 1}}
	var off uint64
	ls := filepath.Join(t.TempDir(), "ls")
	f, err := os.Create(ls)
	if err != nil {
		t.Fatal(err)
	}
	for i := range runs {
		runs[i].FileOff = off
		b := mf.want[runs[i].Page*PageSize : (runs[i].Page+runs[i].Pages)*PageSize]
		if _, err := f.WriteAt(b, int64(off)); err != nil {
			t.Fatal(err)
		}
		off += uint64(len(b))
	}
	f.Close()
	src := newFileSource(t, mf.path)
	src.delay = 50 * time.Microsecond
	r := newTestRegion(t, pages, 0, false)
	s := newSourceServer(t, r.Mapping, src, Options{})
	stop := startServe(t, s)
	loadErr := make(chan error, 1)
	go func() { _, err := s.Load(context.Background(), ls, runs); loadErr <- err }()
	touchPages(t, r, mf.want, shuffled(allPages(pages), 5), 3, nil)
	if err := within(t, loadErr, "Load did not return"); err != nil {
		t.Fatal(err)
	}
	stopChecked(t, r, mf.want, stop)
	st := s.Stats()
	const lsPages = 1001
	t.Logf("load: %d installed, %d faulted first; source reads %d; served %d; wakes %d", st.LoadPages, st.LoadExisting, st.SourceReads, st.Served, st.Wakes)
	if st.LoadPages+st.LoadExisting != lsPages || st.LoadBytes != lsPages*PageSize {
		t.Errorf("load installed %d + found %d pages, read %d bytes; want %d pages", st.LoadPages, st.LoadExisting, st.LoadBytes, lsPages)
	}
	// A fault read just before Load installs its page still reads the
	// source (then finds the page present): a few, not the loaded pages.
	if st.SourceReads > pages-st.LoadPages+st.Exists {
		t.Errorf("source read %d times with %d of %d pages loaded", st.SourceReads, st.LoadPages, pages)
	}
	if st.LoadPages == 0 {
		t.Error("Load installed nothing")
	}
}

func TestLoadFailures(t *testing.T) {
	mf := newMemFile(t, 16, 16, 25)
	r := newTestRegion(t, 16, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	if _, err := s.Load(context.Background(), mf.path, []FileRun{{Page: 10, Pages: 7}}); err == nil || !strings.Contains(err.Error(), "outside") {
		t.Errorf("run beyond the region: %v", err)
	}
	if _, err := s.Load(context.Background(), mf.path, []FileRun{{Page: 0, Pages: 1, FileOff: 100}}); err == nil {
		t.Error("unaligned file offset accepted")
	}
	// The file is shorter than its runs say.
	if _, err := s.Load(context.Background(), mf.path, []FileRun{{Page: 0, Pages: 2, FileOff: 15 * PageSize}}); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("short file: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Load(ctx, mf.path, []FileRun{{Page: 0, Pages: 1}}); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
	s.Close()
	if _, err := s.Load(context.Background(), mf.path, []FileRun{{Page: 0, Pages: 1}}); !errors.Is(err, ErrClosed) {
		t.Errorf("closed: %v", err)
	}
}
