// Package loader runs FaaSnap's loaders: a loading-set file (or extents of
// a file) read sequentially into the page cache, concurrently with the
// guest, shared by the restores of a burst.
package loader

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Loaders runs FaaSnap's loaders: one goroutine a loading-set file reads it
// sequentially (group order) into the page cache from the moment the cold
// request arrives; restores of the same file in a burst join it.
type Loaders struct {
	mu      sync.Mutex
	running map[string]*Load
}

// NewLoaders returns an empty registry.
func NewLoaders() *Loaders { return &Loaders{running: map[string]*Load{}} }

// Extent is a byte range of a file a loader reads.
type Extent struct{ Off, Len int64 }

// Load is one pass over a loading-set file, or over extents of a file.
type Load struct {
	path  string
	ext   []Extent
	done  chan struct{}
	bytes atomic.Uint64
	start time.Time
	end   time.Time
	err   error
}

// Start begins loading path, or joins the load of path already running.
func (l *Loaders) Start(path string) (ld *Load, joined bool) { return l.StartExtents(path, path, nil) }

// StartExtents begins reading ext of path in order (nil: all of path,
// sequentially), or joins the load under key already running.
func (l *Loaders) StartExtents(key, path string, ext []Extent) (ld *Load, joined bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ld, ok := l.running[key]; ok {
		return ld, true
	}
	ld = &Load{path: path, ext: ext, done: make(chan struct{}), start: time.Now()}
	l.running[key] = ld
	// Opened now, before the caller goes on: the file the load reads is
	// the one in place when the restore began (a refresh may replace it).
	f, err := os.Open(path)
	go func() {
		if err != nil {
			ld.err = err
		} else {
			ld.err = ld.run(f)
		}
		ld.end = time.Now()
		l.mu.Lock()
		delete(l.running, key)
		l.mu.Unlock()
		close(ld.done)
	}()
	return ld, false
}

const loaderChunk = 1 << 20

func (ld *Load) run(f *os.File) error {
	defer f.Close()
	buf := make([]byte, loaderChunk)
	if ld.ext != nil {
		return ld.readExtents(f, buf)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	for off := int64(0); ; {
		n, err := f.ReadAt(buf, off)
		ld.bytes.Add(uint64(n))
		off += int64(n)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readExtents reads each extent in chunks; the kernel's readahead applies
// as to any read (the memory file is read where the pages lie).
func (ld *Load) readExtents(f *os.File, buf []byte) error {
	for _, e := range ld.ext {
		for off, end := e.Off, e.Off+e.Len; off < end; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			ld.bytes.Add(uint64(n))
			off += int64(n)
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Done is closed when the load has finished.
func (ld *Load) Done() <-chan struct{} { return ld.done }

// Finished reports whether the load is over.
func (ld *Load) Finished() bool {
	select {
	case <-ld.done:
		return true
	default:
		return false
	}
}

// Bytes read so far.
func (ld *Load) Bytes() uint64 { return ld.bytes.Load() }

// Duration of the load (so far, if still running).
func (ld *Load) Duration() time.Duration {
	if ld.Finished() {
		return ld.end.Sub(ld.start)
	}
	return time.Since(ld.start)
}

// Err is the load's error, once finished.
func (ld *Load) Err() error {
	if !ld.Finished() {
		return nil
	}
	return ld.err
}
