package uffd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrClosed is returned by Serve and Prefetch after Close.
var ErrClosed = errors.New("uffd: server closed")

// Options configure a Server.
type Options struct {
	// Record appends every faulted page (page number relative to the
	// region, first occurrence only) to the list RecordedPages returns: the
	// REAP record phase.
	Record bool
	// Log receives one summary line per Prefetch and per Serve; nil
	// discards. Faults are never logged one by one.
	Log *slog.Logger
}

// Stats are the server's counters. Serve counters and Prefetch counters are
// separate; Exists and Again count both.
type Stats struct {
	// Serve.
	Faults       uint64        // page-fault messages read (a thread may fault on a page more than once)
	Served       uint64        // pages installed by Serve (Copied + Zeroed)
	Copied       uint64        // pages installed by Serve with UFFDIO_COPY
	Zeroed       uint64        // pages installed by Serve with UFFDIO_ZEROPAGE (beyond EOF, or all-zero on a read fault)
	BytesRead    uint64        // bytes read from the memory file by Serve
	Exists       uint64        // EEXIST: the page was already present (Serve and Prefetch)
	Again        uint64        // EAGAIN: the mapping was changing, retried (Serve and Prefetch)
	Wakes        uint64        // UFFDIO_WAKE issued after EEXIST
	Gone         uint64        // ENOENT on a live process: the fault's range was unmapped
	OutOfRange   uint64        // faults outside the region, answered with a zero page
	Removes      uint64        // UFFD_EVENT_REMOVE (madvise DONTNEED/REMOVE), ignored
	Unmaps       uint64        // UFFD_EVENT_UNMAP, ignored
	Forks        uint64        // UFFD_EVENT_FORK, ignored (the child's uffd is closed)
	Remaps       uint64        // UFFD_EVENT_REMAP, ignored
	Unknown      uint64        // other event types, ignored
	Reads        uint64        // read(2) calls on the uffd that returned messages
	FaultTime    time.Duration // total time from reading a fault to installing its page
	MaxFaultTime time.Duration // longest single fault
	ServeTime    time.Duration // wall time of Serve (so far, while it runs)

	// Prefetch (REAP test phase).
	PrefetchPages       uint64        // pages installed by Prefetch
	PrefetchExisting    uint64        // pages Prefetch found already present (EEXIST), skipped
	PrefetchSkipped     uint64        // pages given up after EAGAIN persisted (Serve will fault them in)
	PrefetchCopies      uint64        // UFFDIO_COPY calls issued by Prefetch (after coalescing runs)
	PrefetchBytes       uint64        // bytes read from the working-set file
	PrefetchReads       uint64        // read(2) calls for it (1 unless the kernel returned short)
	PrefetchDirect      bool          // the working-set file was read with O_DIRECT
	PrefetchFallback    string        // why O_DIRECT was not used ("" when it was)
	PrefetchReadTime    time.Duration // open + read of the working-set file
	PrefetchInstallTime time.Duration // all UFFDIO_COPY calls
	PrefetchTime        time.Duration // whole Prefetch call
}

// counters is the live, atomically updated form of Stats.
type counters struct {
	faults, copied, zeroed, bytesRead, exists, again, wakes, gone, outOfRange atomic.Uint64
	removes, unmaps, forks, remaps, unknown, reads                            atomic.Uint64
	faultNS, maxFaultNS                                                       atomic.Int64
	serveStart                                                                atomic.Int64 // unix ns, 0 when not serving
	serveNS                                                                   atomic.Int64 // completed Serve time

	pfPages, pfExisting, pfSkipped, pfCopies, pfBytes, pfReads atomic.Uint64
	pfDirect                                                   atomic.Bool
	pfReadNS, pfInstallNS, pfNS                                atomic.Int64
	pfFallback                                                 atomic.Pointer[string]
}

// Server serves the missing-page faults of one Mapping from a guest memory
// file (file offset = guest offset).
type Server struct {
	r        *Mapping
	uffd     int
	pages    uint64
	mem      *os.File
	memFD    int
	memSize  int64
	opts     Options
	log      *slog.Logger
	stopFD   int // eventfd: Close and ctx cancellation write it
	stopMu   sync.Mutex
	stopShut bool   // stopFD closed
	pidFD    int    // pidfd of the faulting process, -1 if unavailable
	page     []byte // off-heap page buffer for Serve's UFFDIO_COPY source
	zeroOK   atomic.Bool
	openFile func(path string, flags int, perm uint32) (int, error) // unix.Open; tests inject O_DIRECT refusal

	c counters

	recMu    sync.Mutex
	recorded []uint64
	seen     []uint64 // bitmap of recorded pages, Serve goroutine only

	mu      sync.Mutex
	serving bool
	closed  bool
	done    chan struct{}
}

// NewServer prepares to serve r's faults from memFile. It does not take
// ownership of r: close the Server, then the Mapping.
func NewServer(r *Mapping, memFile string, opts Options) (*Server, error) {
	if r == nil || r.FD < 0 {
		return nil, errors.New("uffd: nil or closed region")
	}
	if r.Length == 0 || r.Length%PageSize != 0 || r.Addr%PageSize != 0 {
		return nil, fmt.Errorf("uffd: region %#x+%#x not page-aligned", r.Addr, r.Length)
	}
	// Serve polls the uffd: the kernel reports POLLERR for a blocking one.
	fl, err := unix.FcntlInt(uintptr(r.FD), unix.F_GETFL, 0)
	if err != nil {
		return nil, fmt.Errorf("uffd: fcntl: %w", err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(r.FD), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			return nil, fmt.Errorf("uffd: set O_NONBLOCK: %w", err)
		}
	}
	mem, err := os.OpenFile(memFile, os.O_RDONLY, 0)
	if err != nil {
		return nil, fmt.Errorf("uffd: %w", err)
	}
	st, err := mem.Stat()
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("uffd: %w", err)
	}
	stopFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		mem.Close()
		return nil, fmt.Errorf("uffd: eventfd: %w", err)
	}
	page, err := unix.Mmap(-1, 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		mem.Close()
		unix.Close(stopFD)
		return nil, fmt.Errorf("uffd: mmap page buffer: %w", err)
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		r:        r,
		uffd:     r.FD,
		pages:    r.Length / PageSize,
		mem:      mem,
		memFD:    int(mem.Fd()),
		memSize:  st.Size(),
		opts:     opts,
		log:      log,
		stopFD:   stopFD,
		pidFD:    -1,
		page:     page,
		openFile: unix.Open,
	}
	s.zeroOK.Store(true)
	if pid := r.PeerPID; pid > 0 || r.PID > 0 {
		if pid <= 0 {
			pid = r.PID
		}
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			unix.CloseOnExec(fd)
			s.pidFD = fd
		}
	}
	if opts.Record {
		s.seen = make([]uint64, (s.pages+63)/64)
	}
	return s, nil
}

// Close stops Serve (waiting for it to return) and releases the server's
// resources. It does not close the Mapping.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	done := s.done
	s.mu.Unlock()
	s.signalStop()
	if done != nil {
		<-done
	}
	s.stopMu.Lock()
	s.stopShut = true
	unix.Close(s.stopFD)
	s.stopMu.Unlock()
	if s.pidFD >= 0 {
		unix.Close(s.pidFD)
	}
	unix.Munmap(s.page)
	return s.mem.Close()
}

func (s *Server) signalStop() {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopShut {
		return
	}
	var one [8]byte
	*(*uint64)(unsafe.Pointer(&one[0])) = 1
	unix.Write(s.stopFD, one[:])
}

// Stats returns a snapshot of the counters; it may be called at any time,
// concurrently with Serve and Prefetch.
func (s *Server) Stats() Stats {
	c := &s.c
	st := Stats{
		Faults:              c.faults.Load(),
		Copied:              c.copied.Load(),
		Zeroed:              c.zeroed.Load(),
		BytesRead:           c.bytesRead.Load(),
		Exists:              c.exists.Load(),
		Again:               c.again.Load(),
		Wakes:               c.wakes.Load(),
		Gone:                c.gone.Load(),
		OutOfRange:          c.outOfRange.Load(),
		Removes:             c.removes.Load(),
		Unmaps:              c.unmaps.Load(),
		Forks:               c.forks.Load(),
		Remaps:              c.remaps.Load(),
		Unknown:             c.unknown.Load(),
		Reads:               c.reads.Load(),
		FaultTime:           time.Duration(c.faultNS.Load()),
		MaxFaultTime:        time.Duration(c.maxFaultNS.Load()),
		ServeTime:           time.Duration(c.serveNS.Load()),
		PrefetchPages:       c.pfPages.Load(),
		PrefetchExisting:    c.pfExisting.Load(),
		PrefetchSkipped:     c.pfSkipped.Load(),
		PrefetchCopies:      c.pfCopies.Load(),
		PrefetchBytes:       c.pfBytes.Load(),
		PrefetchReads:       c.pfReads.Load(),
		PrefetchDirect:      c.pfDirect.Load(),
		PrefetchReadTime:    time.Duration(c.pfReadNS.Load()),
		PrefetchInstallTime: time.Duration(c.pfInstallNS.Load()),
		PrefetchTime:        time.Duration(c.pfNS.Load()),
	}
	if start := c.serveStart.Load(); start != 0 {
		st.ServeTime += time.Duration(time.Now().UnixNano() - start)
	}
	st.Served = st.Copied + st.Zeroed
	if p := c.pfFallback.Load(); p != nil {
		st.PrefetchFallback = *p
	}
	return st
}

// RecordedPages returns the pages faulted so far in first-fault order (empty
// unless Options.Record), relative to the region start.
func (s *Server) RecordedPages() []uint64 {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	return append([]uint64(nil), s.recorded...)
}

func (s *Server) record(page uint64) {
	if s.seen == nil || page >= s.pages {
		return
	}
	w, b := page/64, uint64(1)<<(page%64)
	if s.seen[w]&b != 0 {
		return
	}
	s.seen[w] |= b
	s.recMu.Lock()
	s.recorded = append(s.recorded, page)
	s.recMu.Unlock()
}

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
	buf, direct, fallback, reads, err := s.readWorkingSet(wsFile, len(pages))
	if err != nil {
		return s.Stats(), err
	}
	defer unix.Munmap(buf)
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
			ierr = s.installRun(s.r.Addr+pages[i]*PageSize, base+uint64(i)*PageSize, uint64(j-i)*PageSize)
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

// installRun copies [src, src+n) to [dst, dst+n) in the faulting process.
func (s *Server) installRun(dst, src, n uint64) error {
	var off uint64
	var againSince time.Time
	backoff := 50 * time.Microsecond
	for off < n {
		c, err := uffdCopy(s.uffd, dst+off, src+off, n-off, 0)
		s.c.pfCopies.Add(1)
		if c > 0 && err != unix.EEXIST {
			s.c.pfPages.Add(uint64(c) / PageSize)
			off += uint64(c)
		}
		switch err {
		case nil:
			return nil
		case unix.EEXIST:
			// The page at dst+off is present (faulted in, or listed twice):
			// skip it and install the rest of the run.
			s.c.exists.Add(1)
			s.c.pfExisting.Add(1)
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
				s.c.pfSkipped.Add((n - off) / PageSize)
				return nil
			}
			time.Sleep(backoff)
			backoff = min(2*backoff, 10*time.Millisecond)
		case unix.EINTR:
		case unix.ENOENT, unix.ESRCH:
			return fmt.Errorf("uffd: prefetch: UFFDIO_COPY %#x+%#x: %w (process gone or range not registered)", dst+off, n-off, err)
		default:
			return fmt.Errorf("uffd: prefetch: UFFDIO_COPY %#x+%#x: %w", dst+off, n-off, err)
		}
	}
	return nil
}

// ---------------------------------------------------------------------------
// Serve

const readBatch = 64 // uffd_msg structs per read(2)

type fault struct {
	addr  uint64
	flags uint64
	at    time.Time // when it was read
}

type outcome int

const (
	done   outcome = iota // installed, or present and woken
	retry                 // EAGAIN without progress: read pending events, retry
	exited                // the faulting process is gone
)

// Serve answers page faults until the faulting process exits (nil), Close is
// called (nil), ctx ends (ctx.Err()) or an unexpected error occurs. The exit
// is noticed through a pidfd on Mapping.PeerPID (else Mapping.PID); without a
// pid only ESRCH/ENOENT from UFFDIO_COPY reveal it, so cancel ctx or Close
// when the process is reaped. It locks its goroutine to an OS thread. Call it
// once; it may run concurrently with Prefetch.
func (s *Server) Serve(ctx context.Context) (err error) {
	s.mu.Lock()
	switch {
	case s.closed:
		s.mu.Unlock()
		return ErrClosed
	case s.serving:
		s.mu.Unlock()
		return errors.New("uffd: Serve called twice")
	}
	s.serving = true
	s.done = make(chan struct{})
	s.mu.Unlock()
	defer close(s.done)

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop := context.AfterFunc(ctx, s.signalStop)
	defer stop()

	start := time.Now()
	s.c.serveStart.Store(start.UnixNano())
	reason := ""
	defer func() {
		s.c.serveStart.Store(0)
		s.c.serveNS.Add(int64(time.Since(start)))
		st := s.Stats()
		attrs := []any{
			"reason", reason, "faults", st.Faults, "served", st.Served, "copied", st.Copied,
			"zeroed", st.Zeroed, "bytes_read", st.BytesRead, "eexist", st.Exists, "eagain", st.Again,
			"wakes", st.Wakes, "events_remove", st.Removes, "events_unmap", st.Unmaps,
			"events_fork", st.Forks, "reads", st.Reads, "fault_time", st.FaultTime,
			"max_fault_time", st.MaxFaultTime, "serve_time", st.ServeTime,
		}
		if err != nil {
			s.log.Warn("uffd serve failed", append(attrs, "err", err)...)
		} else {
			s.log.Info("uffd serve done", attrs...)
		}
	}()

	pfds := []unix.PollFd{
		{Fd: int32(s.uffd), Events: unix.POLLIN},
		{Fd: int32(s.stopFD), Events: unix.POLLIN},
	}
	if s.pidFD >= 0 {
		pfds = append(pfds, unix.PollFd{Fd: int32(s.pidFD), Events: unix.POLLIN})
	}
	msgs := make([]byte, readBatch*msgSize)
	var pending, batch []fault
	for {
		timeout := -1
		if len(pending) > 0 {
			timeout = 1 // ms: give the event that made UFFDIO_COPY fail with EAGAIN time to be queued
		}
		if _, err := unix.Poll(pfds, timeout); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("uffd: poll: %w", err)
		}
		if pfds[1].Revents != 0 {
			if ctx.Err() != nil {
				reason = "context done"
				return ctx.Err()
			}
			reason = "closed"
			return nil
		}
		if len(pfds) > 2 && pfds[2].Revents != 0 {
			reason = "process exited"
			return nil
		}
		if pfds[0].Revents&unix.POLLNVAL != 0 {
			reason = "uffd closed"
			return nil
		}

		// Drain the queue: several messages per read.
		batch = append(batch[:0], pending...)
		pending = pending[:0]
		for {
			n, err := unix.Read(s.uffd, msgs)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				break
			}
			if err == unix.EBADF {
				reason = "uffd closed"
				return nil
			}
			if err != nil {
				return fmt.Errorf("uffd: read: %w", err)
			}
			if n == 0 {
				reason = "uffd EOF"
				return nil
			}
			s.c.reads.Add(1)
			now := time.Now()
			for off := 0; off+msgSize <= n; off += msgSize {
				m := msgs[off : off+msgSize]
				switch m[msgOffEvent] {
				case eventPagefault:
					s.c.faults.Add(1)
					batch = append(batch, fault{addr: le64(m[msgOffAddress:]), flags: le64(m[msgOffFlags:]), at: now})
				case eventRemove:
					s.c.removes.Add(1)
				case eventUnmap:
					s.c.unmaps.Add(1)
				case eventRemap:
					s.c.remaps.Add(1)
				case eventFork:
					// The kernel installed a new uffd for the child in our fd
					// table; we do not serve children: close it.
					s.c.forks.Add(1)
					unix.Close(int(le32(m[msgOffForkUFD:])))
				default:
					s.c.unknown.Add(1)
				}
			}
			if n < len(msgs) {
				break
			}
		}

		for _, f := range batch {
			switch o, err := s.serveFault(f); {
			case err != nil:
				return err
			case o == retry:
				pending = append(pending, f)
			case o == exited:
				reason = "process exited"
				return nil
			}
		}
	}
}

// serveFault installs the page containing f.addr.
func (s *Server) serveFault(f fault) (outcome, error) {
	addr := f.addr &^ (PageSize - 1)
	if addr < s.r.Addr || addr >= s.r.Addr+s.r.Length {
		s.c.outOfRange.Add(1)
		o, err := s.install(addr, true, f)
		return o, err
	}
	page := (addr - s.r.Addr) / PageSize
	s.record(page)
	off := int64(page) * PageSize
	if off >= s.memSize {
		return s.install(addr, true, f)
	}
	n := 0
	for n < PageSize {
		m, err := unix.Pread(s.memFD, s.page[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, fmt.Errorf("uffd: read memory file at %#x: %w", off+int64(n), err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	clear(s.page[n:])
	s.c.bytesRead.Add(uint64(n))
	zero := f.flags&pagefaultFlagWrite == 0 && isZero(s.page)
	return s.install(addr, zero, f)
}

// install maps a zero page (zero) or s.page at addr, waking the faulting
// threads.
func (s *Server) install(addr uint64, zero bool, f fault) (outcome, error) {
	for {
		var err error
		if zero && s.zeroOK.Load() {
			_, err = uffdZeropage(s.uffd, addr, PageSize, 0)
			if err == unix.EINVAL {
				// ZEROPAGE not supported on this range: copy zeros instead.
				s.zeroOK.Store(false)
				clear(s.page)
				continue
			}
			if err == nil {
				s.c.zeroed.Add(1)
			}
		} else {
			if zero {
				clear(s.page)
			}
			_, err = uffdCopy(s.uffd, addr, uint64(uintptr(unsafe.Pointer(&s.page[0]))), PageSize, 0)
			if err == nil {
				s.c.copied.Add(1)
			}
		}
		switch err {
		case nil:
			s.faultDone(f)
			return done, nil
		case unix.EEXIST:
			// Installed by another fault on the same page or by Prefetch;
			// make sure the thread that raised this fault is not left waiting.
			s.c.exists.Add(1)
			if werr := uffdWake(s.uffd, addr, PageSize); werr == nil {
				s.c.wakes.Add(1)
			}
			s.faultDone(f)
			return done, nil
		case unix.EAGAIN:
			s.c.again.Add(1)
			return retry, nil
		case unix.EINTR:
			continue
		case unix.ESRCH:
			return exited, nil
		case unix.ENOENT:
			if !s.processAlive() {
				return exited, nil
			}
			s.c.gone.Add(1)
			uffdWake(s.uffd, addr, PageSize)
			return done, nil
		case unix.EBADF:
			return exited, nil
		default:
			return done, fmt.Errorf("uffd: install page %#x: %w", addr, err)
		}
	}
}

func (s *Server) faultDone(f fault) {
	d := int64(time.Since(f.at))
	s.c.faultNS.Add(d)
	for {
		old := s.c.maxFaultNS.Load()
		if d <= old || s.c.maxFaultNS.CompareAndSwap(old, d) {
			return
		}
	}
}

// processAlive reports whether the faulting process still runs; without a
// way to tell it answers false, so Serve stops as for an exited process.
func (s *Server) processAlive() bool {
	if s.pidFD >= 0 {
		p := []unix.PollFd{{Fd: int32(s.pidFD), Events: unix.POLLIN}}
		n, err := unix.Poll(p, 0)
		return err == nil && n == 0
	}
	return false
}

func isZero(b []byte) bool {
	// 8 bytes at a time; b is page-sized and page-aligned.
	w := unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), len(b)/8)
	for _, v := range w {
		if v != 0 {
			return false
		}
	}
	return true
}

func le64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}

func le32(b []byte) uint32 {
	_ = b[3]
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
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
