// REAP's prefetch phase: the working set installed before the vCPU runs.

package uffd

import (
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------
// Prefetch (REAP test phase)

// prefetchAgainBudget bounds how long Prefetch retries a run that keeps
// failing with EAGAIN (mapping changing, e.g. a REMOVE event nobody has read
// yet) before leaving it to Serve.
const prefetchAgainBudget = 2 * time.Second

// Prefetch installs a recorded working set before the faulting process runs:
// wsFile holds len(pages) pages back to back, the i-th being the contents of
// guest page pages[i]. The file is read with a single O_DIRECT read into a
// page-aligned buffer (a buffered read where the filesystem refuses O_DIRECT)
// and every page is installed with UFFDIO_COPY, runs of pages consecutive
// both in the guest and in the file with one call. Pages already present are
// skipped (EEXIST). It returns the server's Stats after the prefetch.
func (s *Server) Prefetch(wsFile string, pages []uint64) (Stats, error) {
	return s.prefetch(pages, func() ([]byte, bool, string, int, error) { return s.readWorkingSet(wsFile, len(pages)) })
}

// PrefetchFrom is Prefetch reading the working set from r (named name in
// errors): a working-set file streamed from a registry, say, whose reads
// block until their chunk has arrived.
func (s *Server) PrefetchFrom(r io.ReaderAt, name string, pages []uint64) (Stats, error) {
	return s.prefetch(pages, func() ([]byte, bool, string, int, error) {
		if len(pages) == 0 {
			return nil, false, "", 0, nil
		}
		buf, err := unix.Mmap(-1, 0, len(pages)*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, false, "", 0, fmt.Errorf("uffd: prefetch: mmap %d bytes: %w", len(pages)*PageSize, err)
		}
		if _, err := r.ReadAt(buf, 0); err != nil {
			unix.Munmap(buf)
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return nil, false, "", 0, fmt.Errorf("uffd: prefetch: read %s: %w", name, err)
		}
		return buf, false, "", 1, nil
	})
}

// prefetch installs the working set read returns (a page-aligned mapping,
// unmapped here).
func (s *Server) prefetch(pages []uint64, read func() (buf []byte, direct bool, fallback string, reads int, err error)) (Stats, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return s.Stats(), ErrClosed
	}
	start := time.Now()
	for i, p := range pages {
		if p >= s.pages {
			return s.Stats(), fmt.Errorf("uffd: prefetch: page %d (entry %d) beyond the region's %d pages", p, i, s.pages)
		}
	}
	buf, direct, fallback, reads, err := read()
	if err != nil {
		return s.Stats(), err
	}
	if buf != nil {
		defer unix.Munmap(buf)
	}
	readDone := time.Now()
	s.c.pfReadNS.Add(int64(readDone.Sub(start)))
	s.c.pfBytes.Add(uint64(len(buf)))
	s.c.pfReads.Add(uint64(reads))
	s.c.pfDirect.Store(direct)
	if fallback != "" {
		s.c.pfFallback.Store(&fallback)
	}

	var ierr error
	if len(buf) > 0 {
		base := uint64(uintptr(unsafe.Pointer(&buf[0])))
		for i := 0; i < len(pages) && ierr == nil; {
			j := i + 1
			for j < len(pages) && pages[j] == pages[j-1]+1 {
				j++
			}
			ierr = s.installRun(s.r.Addr+pages[i]*PageSize, base+uint64(i)*PageSize, uint64(j-i)*PageSize, s.prefetchCounters())
			i = j
		}
	}
	runtime.KeepAlive(buf)
	end := time.Now()
	s.c.pfInstallNS.Add(int64(end.Sub(readDone)))
	s.c.pfNS.Add(int64(end.Sub(start)))
	st := s.Stats()
	if ierr != nil {
		return st, ierr
	}
	s.log.Info("uffd prefetch",
		"pages", len(pages), "installed", st.PrefetchPages, "existing", st.PrefetchExisting,
		"skipped", st.PrefetchSkipped, "copies", st.PrefetchCopies, "bytes", st.PrefetchBytes,
		"direct", st.PrefetchDirect, "fallback", st.PrefetchFallback,
		"read", st.PrefetchReadTime, "install", st.PrefetchInstallTime, "total", st.PrefetchTime)
	return st, nil
}

// readWorkingSet reads the whole file into an anonymous (page-aligned)
// mapping with one read, O_DIRECT when the filesystem accepts it.
func (s *Server) readWorkingSet(path string, npages int) (buf []byte, direct bool, fallback string, reads int, err error) {
	want := int64(npages) * PageSize
	fd, err := s.openFile(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_DIRECT, 0)
	direct = err == nil
	if errors.Is(err, unix.EINVAL) {
		fallback = "open O_DIRECT: EINVAL"
		fd, err = s.openFile(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		return nil, false, "", 0, fmt.Errorf("uffd: prefetch: open %s: %w", path, err)
	}
	defer func() { unix.Close(fd) }()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, false, "", 0, fmt.Errorf("uffd: prefetch: stat %s: %w", path, err)
	}
	if st.Size != want {
		return nil, false, "", 0, fmt.Errorf("uffd: prefetch: %s is %d bytes, want %d (%d pages)", path, st.Size, want, npages)
	}
	if want == 0 {
		return nil, direct, fallback, 0, nil
	}
	buf, err = unix.Mmap(-1, 0, int(want), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, false, "", 0, fmt.Errorf("uffd: prefetch: mmap %d bytes: %w", want, err)
	}
	for off := 0; off < len(buf); {
		n, err := unix.Pread(fd, buf[off:], int64(off))
		reads++
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EINVAL && direct:
			// The filesystem accepted the open but not the direct read.
			unix.Close(fd)
			fd, err = s.openFile(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				unix.Munmap(buf)
				return nil, false, "", 0, fmt.Errorf("uffd: prefetch: reopen %s: %w", path, err)
			}
			direct, fallback = false, "read O_DIRECT: EINVAL"
			continue
		case err != nil:
			unix.Munmap(buf)
			return nil, false, "", 0, fmt.Errorf("uffd: prefetch: read %s: %w", path, err)
		case n == 0:
			unix.Munmap(buf)
			return nil, false, "", 0, fmt.Errorf("uffd: prefetch: read %s: %w", path, io.ErrUnexpectedEOF)
		}
		off += n
	}
	return buf, direct, fallback, reads, nil
}

// runCounters are where installRun counts: Prefetch's or Load's.
type runCounters struct{ pages, existing, skipped, copies *atomic.Uint64 }

func (s *Server) prefetchCounters() runCounters {
	return runCounters{&s.c.pfPages, &s.c.pfExisting, &s.c.pfSkipped, &s.c.pfCopies}
}

// installRun copies [src, src+n) to [dst, dst+n) in the faulting process.
func (s *Server) installRun(dst, src, n uint64, rc runCounters) error {
	var off uint64
	var againSince time.Time
	backoff := 50 * time.Microsecond
	for off < n {
		c, err := uffdCopy(s.uffd, dst+off, src+off, n-off, 0)
		rc.copies.Add(1)
		if c > 0 && err != unix.EEXIST {
			rc.pages.Add(uint64(c) / PageSize)
			off += uint64(c)
		}
		switch err {
		case nil:
			return nil
		case unix.EEXIST:
			// The page at dst+off is present (faulted in, or listed twice):
			// skip it and install the rest of the run.
			s.c.exists.Add(1)
			rc.existing.Add(1)
			off += PageSize
			againSince = time.Time{}
		case unix.EAGAIN:
			s.c.again.Add(1)
			if c > 0 {
				againSince = time.Time{} // partial progress; retry the remainder
				continue
			}
			if againSince.IsZero() {
				againSince = time.Now()
			} else if time.Since(againSince) > prefetchAgainBudget {
				rc.skipped.Add((n - off) / PageSize)
				return nil
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 10*time.Millisecond)
		case unix.EINTR:
		case unix.ENOENT, unix.ESRCH:
			return fmt.Errorf("uffd: UFFDIO_COPY %#x+%#x: %w (process gone or range not registered)", dst+off, n-off, err)
		default:
			return fmt.Errorf("uffd: UFFDIO_COPY %#x+%#x: %w", dst+off, n-off, err)
		}
	}
	return nil
}
