// Faults on pages a source must fetch first, parked off the fault loop.

package uffd

import (
	"time"

	"golang.org/x/sys/unix"
)

// maxParked bounds the faults waiting on their fetch at once; beyond it a
// fault's read blocks the fault loop, as without an AsyncSource.
const maxParked = 64

// An AsyncSource is a PageSource that can tell whether a read at off would
// wait for a fetch (Local false), and fetch those bytes without reading
// them. Serve parks a fault on such bytes: a goroutine fetches them while
// faults on local pages go on being served; the fault is served when the
// fetch is done. Faults on different chunks so fetch concurrently.
type AsyncSource interface {
	PageSource
	Local(off int64) bool
	Fetch(off int64) error
}

// park fetches the bytes of f (at off) in the background and queues f to
// be served again when they are here (or the fetch failed: the read of the
// second attempt reports it). It reports false when too many are parked.
func (s *Server) park(f fault, off int64) bool {
	if s.async == nil || s.nparked.Load() >= maxParked {
		return false
	}
	s.nparked.Add(1)
	s.c.parked.Add(1)
	f.fetched = true
	go func() {
		t := time.Now()
		_ = s.async.Fetch(off)
		s.c.parkNS.Add(int64(time.Since(t)))
		s.unparked <- f // never blocks: at most maxParked are out
		s.kick()
	}()
	return true
}

// unpark appends the faults whose fetch ended to batch.
func (s *Server) unpark(batch []fault) []fault {
	var buf [8]byte
	unix.Read(s.parkFD, buf[:]) // reset the eventfd (nonblocking)
	for {
		select {
		case f := <-s.unparked:
			s.nparked.Add(-1)
			batch = append(batch, f)
		default:
			return batch
		}
	}
}

// kick wakes the fault loop to unpark.
func (s *Server) kick() {
	s.stopMu.Lock()
	defer s.stopMu.Unlock()
	if !s.stopShut {
		unix.Write(s.parkFD, one[:])
	}
}
