// Serving missing-page faults on demand.

package uffd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ---------------------------------------------------------------------------
// Serve

const readBatch = 64 // uffd_msg structs per read(2)

type fault struct {
	addr    uint64
	flags   uint64
	at      time.Time // when it was read
	fetched bool      // parked once: its bytes were fetched (or failed to be)
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
	if err := s.beginServing(); err != nil {
		return err
	}
	defer close(s.done)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	stop := context.AfterFunc(ctx, s.signalStop)
	defer stop()

	start := time.Now()
	s.c.serveStart.Store(start.UnixNano())
	reason := ""
	defer func() { s.endServing(start, reason, err) }()

	pfds := []unix.PollFd{
		{Fd: int32(s.uffd), Events: unix.POLLIN},
		{Fd: int32(s.stopFD), Events: unix.POLLIN},
		{Fd: int32(s.parkFD), Events: unix.POLLIN},
	}
	if s.pidFD >= 0 {
		pfds = append(pfds, unix.PollFd{Fd: int32(s.pidFD), Events: unix.POLLIN})
	}
	msgs := make([]byte, readBatch*msgSize)
	var pending, batch []fault
	for {
		if reason, err = s.wait(ctx, pfds, len(pending) > 0); reason != "" || err != nil {
			return err
		}
		batch = append(batch[:0], pending...)
		pending = pending[:0]
		if pfds[2].Revents != 0 {
			batch = s.unpark(batch)
		}
		if batch, reason, err = s.drain(msgs, batch); reason != "" || err != nil {
			return err
		}
		if pending, reason, err = s.serveBatch(batch, pending); reason != "" || err != nil {
			return err
		}
	}
}

// beginServing marks the server serving, once.
func (s *Server) beginServing() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.closed:
		return ErrClosed
	case s.serving:
		return errors.New("uffd: Serve called twice")
	}
	s.serving = true
	s.done = make(chan struct{})
	return nil
}

// endServing accounts the time served and logs why serving ended.
func (s *Server) endServing(start time.Time, reason string, err error) {
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
}

// wait polls until the uffd has messages, or says why serving ends (a
// reason, or the context's error). With retries pending it waits 1 ms at
// most: the event that made UFFDIO_COPY fail with EAGAIN needs time to be
// queued.
func (s *Server) wait(ctx context.Context, pfds []unix.PollFd, retries bool) (string, error) {
	timeout := -1
	if retries {
		timeout = 1
	}
	for {
		_, err := unix.Poll(pfds, timeout)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("uffd: poll: %w", err)
		}
		break
	}
	switch {
	case pfds[1].Revents != 0 && ctx.Err() != nil:
		return "context done", ctx.Err()
	case pfds[1].Revents != 0:
		return "closed", nil
	case len(pfds) > 3 && pfds[3].Revents != 0:
		return "process exited", nil
	case pfds[0].Revents&unix.POLLNVAL != 0:
		return "uffd closed", nil
	}
	return "", nil
}

// drain reads every queued message (several per read), appending page
// faults to batch and counting the other events.
func (s *Server) drain(msgs []byte, batch []fault) ([]fault, string, error) {
	for {
		n, err := unix.Read(s.uffd, msgs)
		switch {
		case err == unix.EINTR:
			continue
		case err == unix.EAGAIN:
			return batch, "", nil
		case err == unix.EBADF:
			return batch, "uffd closed", nil
		case err != nil:
			return batch, "", fmt.Errorf("uffd: read: %w", err)
		case n == 0:
			return batch, "uffd EOF", nil
		}
		s.c.reads.Add(1)
		now := time.Now()
		for off := 0; off+msgSize <= n; off += msgSize {
			batch = s.event(msgs[off:off+msgSize], now, batch)
		}
		if n < len(msgs) {
			return batch, "", nil
		}
	}
}

// event handles one message: a page fault joins batch, other events are
// counted.
func (s *Server) event(m []byte, now time.Time, batch []fault) []fault {
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
		// The kernel installed a new uffd for the child in our fd table; we
		// do not serve children: close it.
		s.c.forks.Add(1)
		unix.Close(int(le32(m[msgOffForkUFD:])))
	default:
		s.c.unknown.Add(1)
	}
	return batch
}

// serveBatch serves a batch of faults; those to retry join pending.
func (s *Server) serveBatch(batch, pending []fault) ([]fault, string, error) {
	for _, f := range batch {
		switch o, err := s.serveFault(f); {
		case err != nil:
			return pending, "", err
		case o == retry:
			pending = append(pending, f)
		case o == exited:
			return pending, "process exited", nil
		}
	}
	return pending, "", nil
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
	if s.takeLoaded(page) {
		// Load installed the page after this fault was raised: wake the
		// thread without reading it. The mark is taken once, so a page
		// dropped since (MADV_DONTNEED) is read on its next fault.
		s.c.exists.Add(1)
		if werr := uffdWake(s.uffd, addr, PageSize); werr == nil {
			s.c.wakes.Add(1)
		}
		s.faultDone(f)
		return done, nil
	}
	if !f.fetched && s.async != nil && !s.async.Local(off) && s.park(f, off) {
		return done, nil // served when its bytes are here
	}
	n, err := s.readPage(off)
	if err != nil {
		return done, err
	}
	clear(s.page[n:])
	s.c.bytesRead.Add(uint64(n))
	zero := f.flags&pagefaultFlagWrite == 0 && isZero(s.page)
	return s.install(addr, zero, f)
}

// readPage reads the page at off into s.page (from the memory file or the
// source) and returns the bytes read; the rest of the page is not cleared.
func (s *Server) readPage(off int64) (int, error) {
	if s.src != nil {
		t := time.Now()
		n, err := s.src.ReadAt(s.page, off)
		s.c.srcNS.Add(int64(time.Since(t)))
		s.c.srcReads.Add(1)
		s.c.srcBytes.Add(uint64(n))
		if err != nil && !errors.Is(err, io.EOF) {
			return n, fmt.Errorf("uffd: read memory source at %#x: %w", off, err)
		}
		return n, nil
	}
	n := 0
	for n < PageSize {
		m, err := unix.Pread(s.memFD, s.page[n:], off+int64(n))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("uffd: read memory file at %#x: %w", off+int64(n), err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
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
