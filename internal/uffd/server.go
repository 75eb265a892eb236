package uffd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
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
	BytesRead    uint64        // bytes read from the memory file (or the PageSource) by Serve
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

	// Faults served from a PageSource (NewSourceServer; zero with a file).
	SourceReads    uint64        // ReadAt calls on the source
	SourceBytes    uint64        // bytes they returned
	SourceReadTime time.Duration // total time in them (a slow source shows here)
	Parked         uint64        // faults parked while their bytes were fetched (AsyncSource)
	ParkTime       time.Duration // total time those fetches took (they overlap)

	// Load (a loading set installed while the process runs).
	LoadPages    uint64        // pages installed by Load
	LoadExisting uint64        // pages Load found already present (faulted in first), skipped
	LoadBytes    uint64        // bytes read from the loading-set file
	LoadTime     time.Duration // Load calls that returned

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

	srcReads, srcBytes, parked     atomic.Uint64
	srcNS, parkNS                  atomic.Int64
	ldPages, ldExisting, ldSkipped atomic.Uint64
	ldCopies, ldBytes              atomic.Uint64
	ldNS                           atomic.Int64
}

// PageSource is where a Server reads the pages it installs when they are
// not in a local file: a lazily filled copy of a remote memory file, say.
// ReadAt may block while the bytes are fetched; bytes beyond Size read as
// zeros. It must be safe for concurrent use.
type PageSource interface {
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
}

// Server serves the missing-page faults of one Mapping from a guest memory
// file or a PageSource (offset = guest offset).
type Server struct {
	r        *Mapping
	uffd     int
	pages    uint64
	mem      *os.File    // the memory file; nil with a source
	memFD    int         // its descriptor (pread, the fast path); -1 with a source
	src      PageSource  // nil with a memory file
	async    AsyncSource // src, if it is one: faults that must fetch are parked
	memSize  int64
	opts     Options
	log      *slog.Logger
	stopFD   int // eventfd: Close and ctx cancellation write it
	parkFD   int // eventfd: a parked fault's fetch ended
	stopMu   sync.Mutex
	stopShut bool   // stopFD and parkFD closed
	pidFD    int    // pidfd of the faulting process, -1 if unavailable
	page     []byte // off-heap page buffer for Serve's UFFDIO_COPY source
	zeroOK   atomic.Bool
	openFile func(path string, flags int, perm uint32) (int, error) // unix.Open; tests inject O_DIRECT refusal

	c counters

	recMu    sync.Mutex
	recorded []uint64
	seen     []uint64 // bitmap of recorded pages, Serve goroutine only

	loaded []atomic.Uint64 // bitmap of pages Load installed, not yet seen by Serve

	unparked chan fault // parked faults whose fetch ended
	nparked  atomic.Int32

	mu      sync.Mutex
	serving bool
	closed  bool
	done    chan struct{}
}

// NewServer prepares to serve r's faults from memFile. It does not take
// ownership of r: close the Server, then the Mapping.
func NewServer(r *Mapping, memFile string, opts Options) (*Server, error) {
	if err := checkMapping(r); err != nil {
		return nil, err
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
	s, err := buildServer(r, opts, st.Size())
	if err != nil {
		mem.Close()
		return nil, err
	}
	s.mem, s.memFD = mem, int(mem.Fd())
	return s, nil
}

// NewSourceServer prepares to serve r's faults from src instead of a local
// file: every missing page is read with src.ReadAt (offset = guest offset).
// The Server does not own src.
func NewSourceServer(r *Mapping, src PageSource, opts Options) (*Server, error) {
	if src == nil {
		return nil, errors.New("uffd: nil page source")
	}
	if err := checkMapping(r); err != nil {
		return nil, err
	}
	s, err := buildServer(r, opts, src.Size())
	if err != nil {
		return nil, err
	}
	s.src = src
	s.async, _ = src.(AsyncSource)
	return s, nil
}

// checkMapping checks r and makes its uffd non-blocking (Serve polls it:
// the kernel reports POLLERR for a blocking one).
func checkMapping(r *Mapping) error {
	if r == nil || r.FD < 0 {
		return errors.New("uffd: nil or closed region")
	}
	if r.Length == 0 || r.Length%PageSize != 0 || r.Addr%PageSize != 0 {
		return fmt.Errorf("uffd: region %#x+%#x not page-aligned", r.Addr, r.Length)
	}
	fl, err := unix.FcntlInt(uintptr(r.FD), unix.F_GETFL, 0)
	if err != nil {
		return fmt.Errorf("uffd: fcntl: %w", err)
	}
	if fl&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(r.FD), unix.F_SETFL, fl|unix.O_NONBLOCK); err != nil {
			return fmt.Errorf("uffd: set O_NONBLOCK: %w", err)
		}
	}
	return nil
}

// buildServer builds the parts of a Server every backing shares.
func buildServer(r *Mapping, opts Options, memSize int64) (*Server, error) {
	stopFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("uffd: eventfd: %w", err)
	}
	parkFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(stopFD)
		return nil, fmt.Errorf("uffd: eventfd: %w", err)
	}
	page, err := unix.Mmap(-1, 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		unix.Close(stopFD)
		unix.Close(parkFD)
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
		memFD:    -1,
		memSize:  memSize,
		opts:     opts,
		log:      log,
		stopFD:   stopFD,
		parkFD:   parkFD,
		unparked: make(chan fault, maxParked),
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
	s.loaded = make([]atomic.Uint64, (s.pages+63)/64)
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
	unix.Close(s.parkFD)
	s.stopMu.Unlock()
	if s.pidFD >= 0 {
		unix.Close(s.pidFD)
	}
	unix.Munmap(s.page)
	if s.mem != nil {
		return s.mem.Close()
	}
	return nil
}

func (s *Server) signalStop() {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if s.stopShut {
		return
	}
	unix.Write(s.stopFD, one[:])
}

// one is an eventfd increment of 1.
var one = func() (b [8]byte) {
	*(*uint64)(unsafe.Pointer(&b[0])) = 1
	return b
}()

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
		SourceReads:         c.srcReads.Load(),
		SourceBytes:         c.srcBytes.Load(),
		SourceReadTime:      time.Duration(c.srcNS.Load()),
		Parked:              c.parked.Load(),
		ParkTime:            time.Duration(c.parkNS.Load()),
		LoadPages:           c.ldPages.Load(),
		LoadExisting:        c.ldExisting.Load(),
		LoadBytes:           c.ldBytes.Load(),
		LoadTime:            time.Duration(c.ldNS.Load()),
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
