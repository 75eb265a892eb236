package uffd

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/polltest"
)

const (
	testFilePages   = 1000 // ~3.9 MiB, the last page partial
	testRegionPages = 1040 // 40 pages beyond the end of the file
)

// (a) Serve only: every page faulted from several threads, reads and writes,
// matches the file; Record lists every page exactly once.
func TestServeOnly(t *testing.T) {
	mf := newMemFile(t, testFilePages, testRegionPages, 1)
	r := newTestRegion(t, testRegionPages, 0, false)
	s := newServer(t, r.Mapping, mf, Options{Record: true})
	stop := startServe(t, s)

	pages := shuffled(allPages(testRegionPages), 2)
	// Every 5th page is first touched by a write fault, every 7th by a
	// kernel (GUP) fault.
	d := touchPages(t, r, mf.want, pages, 4, func(p uint64) access {
		switch {
		case p%5 == 0:
			return writeAccess
		case p%7 == 0:
			return gupAccess
		}
		return readAccess
	})
	stopChecked(t, r, mf.want, stop)
	st := s.Stats()
	t.Logf("served %d pages in %v (%.0f pages/s, mean %v/fault, max %v); copied %d zeroed %d eexist %d eagain %d faults %d reads %d",
		st.Served, d, float64(st.Served)/d.Seconds(), st.FaultTime/time.Duration(max(st.Faults, 1)), st.MaxFaultTime,
		st.Copied, st.Zeroed, st.Exists, st.Again, st.Faults, st.Reads)
	if st.Served != testRegionPages {
		t.Errorf("Served = %d, want %d", st.Served, testRegionPages)
	}
	if st.Faults < st.Served {
		t.Errorf("Faults = %d < Served = %d", st.Faults, st.Served)
	}
	if st.Zeroed == 0 || st.Copied == 0 {
		t.Errorf("want both copied and zeroed pages, got %d and %d", st.Copied, st.Zeroed)
	}
	if max := uint64(testFilePages) * PageSize; st.BytesRead > max {
		t.Errorf("BytesRead = %d > file size", st.BytesRead)
	}

	rec := s.RecordedPages()
	if len(rec) != testRegionPages {
		t.Errorf("recorded %d pages, want %d", len(rec), testRegionPages)
	}
	seen := make(map[uint64]bool)
	for _, p := range rec {
		if seen[p] {
			t.Fatalf("page %d recorded twice", p)
		}
		seen[p] = true
	}
	sorted := slices.Sorted(slices.Values(rec))
	if !slices.Equal(sorted, allPages(testRegionPages)) {
		t.Errorf("recorded pages are not exactly the region's pages")
	}
}

// (b) Prefetch a shuffled working set, then Serve the rest.
func TestPrefetchThenServe(t *testing.T) {
	for _, order := range []string{"shuffled", "sorted"} {
		t.Run(order, func(t *testing.T) {
			mf := newMemFile(t, testFilePages, testRegionPages, 3)
			r := newTestRegion(t, testRegionPages, 0, false)
			s := newServer(t, r.Mapping, mf, Options{Record: true})

			// Working set: a few runs and scattered pages, some beyond EOF.
			var ws []uint64
			for _, run := range [][2]uint64{{0, 64}, {200, 260}, {500, 503}, {990, 1010}} {
				for p := run[0]; p < run[1]; p++ {
					ws = append(ws, p)
				}
			}
			for p := uint64(300); p < 480; p += 7 {
				ws = append(ws, p)
			}
			if order == "shuffled" {
				ws = shuffled(ws, 4)
			} else {
				slices.Sort(ws)
			}

			st := prefetch(t, s, mf, ws)
			t.Logf("prefetch %d pages: %d copies, direct=%v %q, read %v, install %v, total %v",
				len(ws), st.PrefetchCopies, st.PrefetchDirect, st.PrefetchFallback,
				st.PrefetchReadTime, st.PrefetchInstallTime, st.PrefetchTime)
			if st.PrefetchPages != uint64(len(ws)) || st.PrefetchExisting != 0 || st.PrefetchSkipped != 0 {
				t.Fatalf("prefetch installed %d existing %d skipped %d, want %d/0/0",
					st.PrefetchPages, st.PrefetchExisting, st.PrefetchSkipped, len(ws))
			}
			if st.PrefetchBytes != uint64(len(ws))*PageSize || st.PrefetchReads != 1 {
				t.Errorf("prefetch read %d bytes in %d reads, want %d in 1", st.PrefetchBytes, st.PrefetchReads, len(ws)*PageSize)
			}
			if order == "sorted" && st.PrefetchCopies != 4+uint64((480-300+6)/7) {
				t.Errorf("sorted working set: %d UFFDIO_COPY calls, want one per run", st.PrefetchCopies)
			}
			if st.Faults != 0 {
				t.Errorf("faults before Serve: %d", st.Faults)
			}
			// Prefetched pages are present without any fault being served.
			for _, p := range ws {
				if got, want := r.mem[p*PageSize+100], mf.want[p*PageSize+100]; got != want {
					t.Fatalf("prefetched page %d: byte %d, want %d", p, got, want)
				}
			}

			stop := startServe(t, s)
			touchPages(t, r, mf.want, shuffled(allPages(testRegionPages), 5), 3, nil)
			stopChecked(t, r, mf.want, stop)
			st = s.Stats()
			if want := uint64(testRegionPages - len(ws)); st.Served != want {
				t.Errorf("Served = %d, want %d (total - prefetched)", st.Served, want)
			}
			rec := s.RecordedPages()
			inWS := make(map[uint64]bool)
			for _, p := range ws {
				inWS[p] = true
			}
			for _, p := range rec {
				if inWS[p] {
					t.Errorf("prefetched page %d faulted", p)
				}
			}
			if len(rec) != testRegionPages-len(ws) {
				t.Errorf("recorded %d pages, want %d", len(rec), testRegionPages-len(ws))
			}
		})
	}
}

// (c) EEXIST: prefetching pages that were already faulted in skips them,
// including in the middle of a coalesced run (the kernel reports the partial
// copy as EAGAIN with the bytes copied, then EEXIST for the present page).
func TestPrefetchExisting(t *testing.T) {
	mf := newMemFile(t, testFilePages, testRegionPages, 6)
	r := newTestRegion(t, testRegionPages, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	stop := startServe(t, s)

	faulted := []uint64{10, 15, 20, 21, 700}
	touchPages(t, r, mf.want, faulted, 1, nil)
	// The faulting thread is woken by UFFDIO_COPY, before Serve counts it.
	waitFor(t, "faulted pages counted", func() bool { return s.Stats().Served == uint64(len(faulted)) })

	var ws []uint64
	for p := uint64(10); p < 30; p++ {
		ws = append(ws, p)
	}
	ws = append(ws, 700, 701, 10) // 10 listed twice
	st := prefetch(t, s, mf, ws)
	t.Logf("prefetch: installed %d, existing %d, copies %d, eagain %d, eexist %d",
		st.PrefetchPages, st.PrefetchExisting, st.PrefetchCopies, st.Again, st.Exists)
	if st.PrefetchExisting != 6 || st.PrefetchPages != uint64(len(ws)-6) {
		t.Errorf("prefetch existing %d installed %d, want 6 and %d", st.PrefetchExisting, st.PrefetchPages, len(ws)-6)
	}
	if st.Again == 0 {
		t.Errorf("expected EAGAIN for the partial copies stopped by a present page")
	}
	touchPages(t, r, mf.want, allPages(testRegionPages), 2, nil)
	stopChecked(t, r, mf.want, stop)
	// Served counts the 5 pages faulted before the prefetch too.
	if st := s.Stats(); st.Served != uint64(testRegionPages-(len(ws)-6)) {
		t.Errorf("served %d, want %d", st.Served, testRegionPages-(len(ws)-6))
	}
}

// Prefetch concurrently with faults on the same pages: every page is
// installed exactly once between the two, whoever wins.
func TestPrefetchRacesFaults(t *testing.T) {
	mf := newMemFile(t, testFilePages, testRegionPages, 8)
	r := newTestRegion(t, testRegionPages, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	stop := startServe(t, s)
	ws := allPages(testFilePages)
	wsFile := writeWS(t, "", mf, ws)
	// Fault from two threads; start the prefetch once faults are flowing.
	perr := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(testTimeout)
		for s.Stats().Faults == 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Microsecond)
		}
		_, err := s.Prefetch(wsFile, ws)
		perr <- err
	}()
	touchPages(t, r, mf.want, shuffled(allPages(testRegionPages), 9), 2, nil)
	if err := within(t, perr, "Prefetch did not finish"); err != nil {
		t.Fatal(err)
	}
	checkContents(t, r, mf.want)
	stop()
	st := s.Stats()
	t.Logf("race: prefetch installed %d existing %d, serve served %d, eexist %d eagain %d wakes %d",
		st.PrefetchPages, st.PrefetchExisting, st.Served, st.Exists, st.Again, st.Wakes)
	if st.PrefetchPages+st.Served != testRegionPages || st.PrefetchPages+st.PrefetchExisting != uint64(len(ws)) {
		t.Errorf("prefetched %d + served %d != %d pages", st.PrefetchPages, st.Served, testRegionPages)
	}
}

// O_DIRECT refused by the filesystem: Prefetch falls back to a buffered read
// and says so.
func TestPrefetchDirectFallback(t *testing.T) {
	mf := newMemFile(t, 64, 64, 10)
	r := newTestRegion(t, 64, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	s.openFile = func(path string, flags int, perm uint32) (int, error) {
		if flags&unix.O_DIRECT != 0 {
			return -1, unix.EINVAL
		}
		return unix.Open(path, flags, perm)
	}
	ws := allPages(64)
	st := prefetch(t, s, mf, ws)
	if st.PrefetchDirect || st.PrefetchFallback == "" {
		t.Errorf("direct=%v fallback=%q, want a recorded fallback", st.PrefetchDirect, st.PrefetchFallback)
	}
	if st.PrefetchPages != 64 || st.PrefetchCopies != 1 {
		t.Errorf("installed %d pages in %d copies, want 64 in 1", st.PrefetchPages, st.PrefetchCopies)
	}
	checkContents(t, r, mf.want)
}

// The working set on tmpfs (/dev/shm): tmpfs gained O_DIRECT in Linux 6.6,
// older kernels refuse it with EINVAL and take the fallback. Either is fine.
func TestPrefetchTmpfs(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "uffd-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(dir)
	mf := newMemFile(t, 32, 32, 11)
	r := newTestRegion(t, 32, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	ws := allPages(32)
	wsFile := writeWS(t, dir, mf, ws)
	st, err := s.Prefetch(wsFile, ws)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tmpfs working set: direct=%v fallback=%q", st.PrefetchDirect, st.PrefetchFallback)
	checkContents(t, r, mf.want)
}

func TestPrefetchValidation(t *testing.T) {
	mf := newMemFile(t, 16, 16, 12)
	r := newTestRegion(t, 16, 0, false)
	s := newServer(t, r.Mapping, mf, Options{})
	wsFile := writeWS(t, "", mf, []uint64{1, 2})
	if _, err := s.Prefetch(wsFile, []uint64{1, 2, 3}); err == nil {
		t.Error("Prefetch accepted a page list longer than the file")
	}
	if _, err := s.Prefetch(wsFile, []uint64{1, 16}); err == nil {
		t.Error("Prefetch accepted a page beyond the region")
	}
	if st := s.Stats(); st.PrefetchPages != 0 {
		t.Errorf("installed %d pages despite errors", st.PrefetchPages)
	}
	// ENOENT: the range is no longer registered.
	if err := unregister(r.FD, r.Addr, r.Length); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prefetch(wsFile, []uint64{1, 2}); !errors.Is(err, unix.ENOENT) {
		t.Errorf("Prefetch on an unregistered range: %v, want ENOENT", err)
	}
}

// Non-cooperative events: madvise(DONTNEED) raises REMOVE (and makes
// in-flight copies fail with EAGAIN until the event is read), munmap raises
// UNMAP; Serve counts them, keeps serving and refaults removed pages.
func TestNonCooperativeEvents(t *testing.T) {
	const pages = 256
	mf := newMemFile(t, pages, pages, 13)
	r := newTestRegion(t, pages, featureEventRemove|featureEventUnmap, false)
	s := newServer(t, r.Mapping, mf, Options{})
	stop := startServe(t, s)

	touchPages(t, r, mf.want, allPages(pages), 2, nil)
	// Each round: drop every page, then drop the first half again while
	// other threads fault the whole region back in, so faults race with a
	// REMOVE event in flight (UFFDIO_COPY then fails with EAGAIN until Serve
	// has read the event).
	madvise := func(n int) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := unix.Madvise(r.mem[:n*PageSize], unix.MADV_DONTNEED); err != nil {
				t.Errorf("madvise: %v", err)
			}
		}()
		if !waitTimeout(&wg, testTimeout) {
			r.unblock()
			t.Fatal("madvise blocked: REMOVE event never read")
		}
	}
	for round := 0; round < 20; round++ {
		madvise(pages)
		done := make(chan struct{})
		go func() { defer close(done); madvise(pages / 2) }()
		touchPages(t, r, mf.want, shuffled(allPages(pages), uint64(round)), 2, nil)
		<-done
	}
	touchPages(t, r, mf.want, allPages(pages), 2, nil)
	checkContents(t, r, mf.want)

	// Unmap the last 16 pages (munmap waits until Serve reads UNMAP).
	tail := r.Addr + (pages-16)*PageSize
	done := make(chan error, 1)
	go func() {
		_, _, e := unix.Syscall(unix.SYS_MUNMAP, uintptr(tail), 16*PageSize, 0)
		if e != 0 {
			done <- e
			return
		}
		done <- nil
	}()
	if err := within(t, done, "munmap blocked: UNMAP event never read"); err != nil {
		t.Fatal(err)
	}
	r.mem = r.mem[:(pages-16)*PageSize]
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("events: remove %d unmap %d; served %d faults %d eexist %d eagain %d wakes %d",
		st.Removes, st.Unmaps, st.Served, st.Faults, st.Exists, st.Again, st.Wakes)
	if st.Removes == 0 || st.Unmaps == 0 {
		t.Errorf("want REMOVE and UNMAP events, got %d and %d", st.Removes, st.Unmaps)
	}
	if st.Removes < 40 {
		t.Errorf("REMOVE events %d, want at least 40", st.Removes)
	}
	if st.Served < 21*pages {
		t.Errorf("served %d, want at least %d (removed pages refault)", st.Served, 21*pages)
	}
}

// Close stops Serve and makes later calls fail; ctx cancellation returns
// ctx.Err().
func TestServeStop(t *testing.T) {
	mf := newMemFile(t, 8, 8, 14)
	r := newTestRegion(t, 8, 0, false)

	s := newServer(t, r.Mapping, mf, Options{})
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	time.Sleep(10 * time.Millisecond)
	if err := s.Serve(context.Background()); err == nil {
		t.Error("second Serve succeeded")
	}
	s.Close()
	if err := within(t, errc, "Serve did not return after Close"); err != nil {
		t.Errorf("Serve after Close: %v, want nil", err)
	}
	if err := s.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve on a closed server: %v", err)
	}
	if _, err := s.Prefetch("/nonexistent", nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Prefetch on a closed server: %v", err)
	}

	s2 := newServer(t, r.Mapping, mf, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s2.Serve(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Serve with an expiring ctx: %v", err)
	}
}

// waitFor polls cond until it holds or testTimeout passes.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, testTimeout, what, cond)
}

// Faults outside the Mapping (the uffd covers more than the shim announced)
// get a zero page instead of leaving the thread blocked.
func TestOutOfRangeFault(t *testing.T) {
	mf := newMemFile(t, 16, 16, 16)
	r := newTestRegion(t, 24, 0, false)
	reg := &Mapping{Addr: r.Addr, Length: 16 * PageSize, PID: os.Getpid(), FD: r.FD}
	s := newServer(t, reg, mf, Options{Record: true})
	stop := startServe(t, s)
	touchPages(t, r, mf.want, allPages(24), 2, nil)
	want := append(append([]byte(nil), mf.want...), make([]byte, 8*PageSize)...)
	checkContents(t, r, want)
	stop()
	if st := s.Stats(); st.OutOfRange != 8 || st.Served != 24 || len(s.RecordedPages()) != 16 {
		t.Errorf("out of range %d served %d recorded %d, want 8, 24, 16", st.OutOfRange, st.Served, len(s.RecordedPages()))
	}
}
