package agent

import (
	"fmt"
	"io"
	"os"
)

// spillAbove is how many bytes of a result are kept in memory as they
// arrive; a longer result goes to a spill file.
const spillAbove = 1 << 20

// spill holds a result as it arrives: in memory up to spillAbove bytes, then
// in an unlinked file of dir, so that a large result never passes through
// growing buffers. Bytes reads it back into one buffer of its exact size.
type spill struct {
	dir string // "": the system's temporary directory
	mem []byte
	f   *os.File
	n   int64
}

func (s *spill) Write(p []byte) (int, error) {
	if s.f == nil && len(s.mem)+len(p) <= spillAbove {
		s.mem = append(s.mem, p...)
		s.n += int64(len(p))
		return len(p), nil
	}
	if s.f == nil {
		if err := s.toFile(); err != nil {
			return 0, err
		}
	}
	n, err := s.f.Write(p)
	s.n += int64(n)
	if err != nil {
		return n, fmt.Errorf("spill a result: %w", err)
	}
	return n, nil
}

// toFile moves what is held in memory to a new file that has no name
// (removed as soon as it is created), so nothing is left behind whatever
// happens to the process.
func (s *spill) toFile() error {
	f, err := os.CreateTemp(s.dir, ".result-*")
	if err != nil {
		return fmt.Errorf("spill a result: %w", err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return fmt.Errorf("spill a result: %w", err)
	}
	if _, err := f.Write(s.mem); err != nil {
		f.Close()
		return fmt.Errorf("spill a result: %w", err)
	}
	s.f, s.mem = f, nil
	return nil
}

// Len is how many bytes were written.
func (s *spill) Len() int64 { return s.n }

// Bytes is everything written, in one buffer of its exact size.
func (s *spill) Bytes() ([]byte, error) {
	if s.f == nil {
		return s.mem, nil
	}
	b := make([]byte, s.n)
	if _, err := io.ReadFull(io.NewSectionReader(s.f, 0, s.n), b); err != nil {
		return nil, fmt.Errorf("read a spilled result back: %w", err)
	}
	return b, nil
}

// Close drops what is held.
func (s *spill) Close() {
	if s.f != nil {
		s.f.Close()
		s.f = nil
	}
	s.mem, s.n = nil, 0
}
