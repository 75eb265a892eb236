// Package lazytest provides a restore.MemorySource for tests: a stand-in
// for the registry's chunk cache that serves a real memory file's bytes,
// "fetching" each 512 KiB chunk once with an injected delay, and that can
// be told to fail.
package lazytest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/restore"
	"golang.org/x/sys/unix"
)

// ChunkSize is the chunk the source fetches at a time.
const ChunkSize = 512 << 10

// ErrFetch is what ReadAt returns once Fail was called.
var ErrFetch = errors.New("lazytest: chunk fetch failed: object store unreachable")

// Source serves a memory file like a chunk cache over a slow store: the
// first read of a chunk waits Delay (a fetch), later reads of it are hits.
type Source struct {
	f     *os.File
	size  int64
	Delay time.Duration

	mu      sync.Mutex
	fetched map[int64]chan struct{} // closed once the chunk is here

	fail                  atomic.Bool
	failAfter             atomic.Uint64 // reads that succeed before Fail takes effect; 0: none
	bytes, chunks, hits   atomic.Uint64
	prefetches, readCalls atomic.Uint64
}

var _ restore.MemorySource = (*Source)(nil)

// Open serves path; close the Source when done.
func Open(path string, delay time.Duration) (*Source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Source{f: f, size: st.Size(), Delay: delay, fetched: map[int64]chan struct{}{}}, nil
}

// Close closes the file.
func (s *Source) Close() error { return s.f.Close() }

// Fail makes every later ReadAt fail with ErrFetch.
func (s *Source) Fail() { s.fail.Store(true) }

// FailAfter lets n more reads succeed, then fails every later one.
func (s *Source) FailAfter(n uint64) {
	s.failAfter.Store(s.readCalls.Load() + n)
	s.fail.Store(true)
}

// Size is the memory file's size.
func (s *Source) Size() int64 { return s.size }

// ReadAt fetches the chunks p covers (once each, waiting Delay per chunk
// fetched), then reads the file.
func (s *Source) ReadAt(p []byte, off int64) (int, error) {
	calls := s.readCalls.Add(1)
	if s.fail.Load() && calls > s.failAfter.Load() {
		return 0, fmt.Errorf("read at %d: %w", off, ErrFetch)
	}
	if off < 0 {
		return 0, fmt.Errorf("lazytest: negative offset %d", off)
	}
	end := min(off+int64(len(p)), s.size)
	for c := off / ChunkSize * ChunkSize; c < end; c += ChunkSize {
		s.fetch(c)
	}
	return s.f.ReadAt(p, off)
}

// Local reports whether the chunk holding off was fetched.
func (s *Source) Local(off int64) bool {
	s.mu.Lock()
	here, ok := s.fetched[off/ChunkSize*ChunkSize]
	s.mu.Unlock()
	if !ok {
		return false
	}
	select {
	case <-here:
		return true
	default:
		return false
	}
}

// Fetch fetches the chunk holding off, or fails as the next ReadAt would.
func (s *Source) Fetch(off int64) error {
	if s.fail.Load() && s.readCalls.Load() >= s.failAfter.Load() {
		return fmt.Errorf("fetch at %d: %w", off, ErrFetch)
	}
	if off >= 0 && off < s.size {
		s.fetch(off / ChunkSize * ChunkSize)
	}
	return nil
}

// fetch waits Delay the first time chunk c is asked for; a read of a chunk
// being fetched waits for it (single flight).
func (s *Source) fetch(c int64) {
	s.mu.Lock()
	here, ok := s.fetched[c]
	if !ok {
		here = make(chan struct{})
		s.fetched[c] = here
	}
	s.mu.Unlock()
	if ok {
		<-here
		s.hits.Add(1)
		return
	}
	time.Sleep(s.Delay)
	s.chunks.Add(1)
	s.bytes.Add(uint64(min(ChunkSize, s.size-c)))
	close(here)
}

// Prefetch fetches the chunks of [off, off+n) in the background.
func (s *Source) Prefetch(ctx context.Context, off, n int64) {
	s.prefetches.Add(1)
	go func() {
		for c := max(off, 0) / ChunkSize * ChunkSize; c < min(off+n, s.size) && ctx.Err() == nil; c += ChunkSize {
			s.fetch(c)
		}
	}()
}

// SourceStats are the source's counters.
func (s *Source) SourceStats() restore.SourceStats {
	return restore.SourceStats{FetchedBytes: s.bytes.Load(), FetchedChunks: s.chunks.Load(), CacheHits: s.hits.Load()}
}

// ReadCalls counts ReadAt calls, failed ones included.
func (s *Source) ReadCalls() uint64 { return s.readCalls.Load() }

// Placeholder creates a sparse file of size bytes at path, all holes: what
// QEMU opens in place of a memory file that is not on this host.
func Placeholder(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// AllHoles reports whether path holds no data at all (SEEK_DATA finds
// none): a placeholder nobody wrote.
func AllHoles(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	_, err = unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return true, nil
	}
	return false, err
}
