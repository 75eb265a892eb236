// FaaSnap's concurrent paging: a loading set installed while the process runs.

package uffd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// FileRun is a run of guest pages stored back to back in a file.
type FileRun struct {
	Page    uint64 // first guest page, relative to the region
	Pages   uint64 // pages in the run
	FileOff uint64 // byte offset of the first page in the file (page-aligned)
}

// loadChunk bounds one read of Load: pages reach the guest a chunk at a
// time, in file order, while faults are served.
const loadChunk = 1 << 20

// Load installs the runs of path with UFFDIO_COPY, in the order given,
// reading at most 1 MiB at a time, while Serve answers faults: a page
// faulted first is served by Serve (Load then finds it present and skips
// it), a fault on a page Load installs is woken without reading anything.
// It stops early when ctx ends or the Server closes (returning that error).
// Unlike Prefetch, the process runs meanwhile.
func (s *Server) Load(ctx context.Context, path string, runs []FileRun) (Stats, error) {
	f, err := os.Open(path)
	if err != nil {
		return s.Stats(), fmt.Errorf("uffd: load: %w", err)
	}
	defer f.Close()
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	return s.LoadFrom(ctx, f, path, runs)
}

// LoadFrom is Load reading the runs from r (named name in errors): a
// loading set streamed from a registry, say, whose reads block until
// their chunk has arrived.
func (s *Server) LoadFrom(ctx context.Context, f io.ReaderAt, path string, runs []FileRun) (Stats, error) {
	start := time.Now()
	defer func() { s.c.ldNS.Add(int64(time.Since(start))) }()
	for i, r := range runs {
		if r.Pages == 0 || r.Page >= s.pages || r.Pages > s.pages-r.Page || r.FileOff%PageSize != 0 {
			return s.Stats(), fmt.Errorf("uffd: load: run %d (%d+%d at file offset %d) outside the region's %d pages", i, r.Page, r.Pages, r.FileOff, s.pages)
		}
	}
	buf, err := unix.Mmap(-1, 0, loadChunk, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return s.Stats(), fmt.Errorf("uffd: load: mmap buffer: %w", err)
	}
	defer unix.Munmap(buf)
	rc := runCounters{&s.c.ldPages, &s.c.ldExisting, &s.c.ldSkipped, &s.c.ldCopies}
	for _, r := range runs {
		for done := uint64(0); done < r.Pages; {
			if err := s.loadStopped(ctx); err != nil {
				return s.Stats(), err
			}
			n := min(r.Pages-done, loadChunk/PageSize)
			b := buf[:n*PageSize]
			if _, err := f.ReadAt(b, int64(r.FileOff+done*PageSize)); err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF
				}
				return s.Stats(), fmt.Errorf("uffd: load: read %s: %w", path, err)
			}
			s.c.ldBytes.Add(uint64(len(b)))
			page := r.Page + done
			if err := s.installRun(s.r.Addr+page*PageSize, uint64(uintptr(unsafe.Pointer(&b[0]))), uint64(len(b)), rc); err != nil {
				return s.Stats(), fmt.Errorf("uffd: load: %w", err)
			}
			s.markLoaded(page, n)
			done += n
		}
	}
	return s.Stats(), nil
}

func (s *Server) loadStopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// markLoaded notes pages [page, page+n) as installed by Load.
func (s *Server) markLoaded(page, n uint64) {
	for p := page; p < page+n; p++ {
		s.loaded[p/64].Or(1 << (p % 64))
	}
}

// takeLoaded reports whether Load installed page since Serve last looked,
// and forgets it.
func (s *Server) takeLoaded(page uint64) bool {
	b := uint64(1) << (page % 64)
	return s.loaded[page/64].And(^b)&b != 0
}
