package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// prefetchWorkers is how many chunks a Prefetch fetches at once.
const prefetchWorkers = 4

// LazyFile is one file of a remote snapshot read through the cache: a
// chunk is fetched from the store the first time a read touches it, holes
// read as zeros. Its chunks are pinned in the cache until Close. Safe for
// concurrent use. After a chunk's first read, ReadAt on it is one pread on
// a descriptor kept open, with no allocation and no lock.
type LazyFile struct {
	c      *Cache
	ctx    context.Context // bounds fetches started by ReadAt
	cancel context.CancelFunc
	cs     int64
	size   int64
	sums   []string // per chunk index; "" for a hole
	pinned []string
	fds    []atomic.Pointer[os.File]
	mem    []atomic.Pointer[[]byte] // a fetched chunk's bytes until its cache file is open
	closed atomic.Bool
	wg     sync.WaitGroup // running prefetches

	writesMu sync.Mutex
	writes   []*flight // fetched chunks being written to the cache

	fetchedBytes, fetchedChunks, hits, fetchNS atomic.Int64
}

// LazyStats are one LazyFile's counters: what its reads and prefetches
// fetched from the store (compressed bytes, chunks), the time those
// fetches took (summed: parallel fetches overlap), and what they found in
// the cache.
type LazyStats struct {
	FetchedBytes, FetchedChunks, Hits int64
	FetchTime                         time.Duration
}

// Stats returns the file's counters so far.
func (f *LazyFile) Stats() LazyStats {
	return LazyStats{FetchedBytes: f.fetchedBytes.Load(), FetchedChunks: f.fetchedChunks.Load(), Hits: f.hits.Load(),
		FetchTime: time.Duration(f.fetchNS.Load())}
}

// Open returns the file named file (a path relative to the snapshot, e.g.
// "memory") of the remote snapshot rm. ctx bounds the fetches of the
// file's lifetime.
func (c *Cache) Open(ctx context.Context, rm *RemoteManifest, file string) (*LazyFile, error) {
	rf := rm.File(file)
	if rf == nil {
		return nil, fmt.Errorf("%w: snapshot %s has no file %s", ErrNotFound, rm.ID, file)
	}
	n := (rf.Size + rm.ChunkSize - 1) / rm.ChunkSize
	lf := &LazyFile{c: c, cs: rm.ChunkSize, size: rf.Size, sums: make([]string, n), fds: make([]atomic.Pointer[os.File], n),
		mem: make([]atomic.Pointer[[]byte], n)}
	for _, ch := range rf.Chunks {
		lf.sums[ch.Index] = ch.SHA256
		lf.pinned = append(lf.pinned, ch.SHA256)
	}
	lf.ctx, lf.cancel = context.WithCancel(ctx)
	c.pin(lf.pinned)
	return lf, nil
}

// Local reports whether the chunk holding off is open for reading here (a
// read of it fetches nothing).
func (f *LazyFile) Local(off int64) bool {
	if off < 0 || off >= f.size {
		return true
	}
	idx := off / f.cs
	return f.sums[idx] == "" || f.fds[idx].Load() != nil || f.mem[idx].Load() != nil
}

// Fetch makes the chunk holding off local (a later read of it fetches
// nothing), fetching it if needed.
func (f *LazyFile) Fetch(off int64) error {
	if f.Local(off) {
		return nil
	}
	if f.closed.Load() {
		return os.ErrClosed
	}
	_, _, err := f.chunk(f.ctx, off/f.cs)
	return err
}

// Size is the file's size in bytes.
func (f *LazyFile) Size() int64 { return f.size }

// ChunkSize is the size of the file's chunks (the last may be shorter).
func (f *LazyFile) ChunkSize() int64 { return f.cs }

// ReadAt reads len(p) bytes at off, fetching missing chunks. It returns
// io.EOF when the read reaches past the end of the file.
func (f *LazyFile) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("lazy file: negative offset")
	}
	if f.closed.Load() {
		return 0, os.ErrClosed
	}
	n := 0
	for n < len(p) {
		if off >= f.size {
			return n, io.EOF
		}
		idx := off / f.cs
		within := off - idx*f.cs
		k := int(min(int64(len(p)-n), min(f.cs, f.size-idx*f.cs)-within))
		dst := p[n : n+k]
		if f.sums[idx] == "" {
			clear(dst)
		} else {
			fd, data, err := f.chunk(f.ctx, idx)
			if err != nil {
				return n, err
			}
			if fd == nil {
				copy(dst, data[within:])
			} else if _, err := fd.ReadAt(dst, within); err != nil {
				return n, fmt.Errorf("lazy file: chunk %d: %w", idx, err)
			}
		}
		n += k
		off += int64(k)
	}
	return n, nil
}

// chunk returns the open cache file of chunk idx, or its bytes while a
// fetch of it is being written to the cache, fetching it first.
func (f *LazyFile) chunk(ctx context.Context, idx int64) (*os.File, []byte, error) {
	if fd := f.fds[idx].Load(); fd != nil {
		return fd, nil, nil
	}
	if m := f.mem[idx].Load(); m != nil {
		return nil, *m, nil
	}
	sum := f.sums[idx]
	t := time.Now()
	n, hit, fl, err := f.c.ensure(ctx, sum, int(min(f.cs, f.size-idx*f.cs)))
	f.fetchedBytes.Add(n)
	switch {
	case hit:
		f.hits.Add(1)
	case err == nil && n > 0:
		f.fetchedChunks.Add(1)
		f.fetchNS.Add(int64(time.Since(t)))
	}
	if err != nil {
		return nil, nil, err
	}
	if fl != nil {
		data := fl.data
		if f.mem[idx].CompareAndSwap(nil, &data) && f.track(fl) {
			go f.adopt(idx, fl)
		}
		return nil, data, nil
	}
	fd, err := f.open(idx)
	return fd, nil, err
}

// track notes a chunk write Close must wait for; false once closed.
func (f *LazyFile) track(fl *flight) bool {
	f.writesMu.Lock()
	defer f.writesMu.Unlock()
	if f.closed.Load() {
		return false
	}
	f.writes = append(f.writes, fl)
	return true
}

// adopt switches chunk idx from its bytes in memory to its cache file once
// written (a failed write keeps the bytes in memory).
func (f *LazyFile) adopt(idx int64, fl *flight) {
	<-fl.written
	if fl.werr != nil {
		return
	}
	if _, err := f.open(idx); err == nil {
		f.mem[idx].Store(nil)
	}
}

// open opens the cache file of chunk idx (on disk) once.
func (f *LazyFile) open(idx int64) (*os.File, error) {
	fd, err := os.Open(f.c.path(f.sums[idx]))
	if err != nil {
		return nil, fmt.Errorf("lazy file: %w", err)
	}
	if !f.fds[idx].CompareAndSwap(nil, fd) {
		fd.Close()
		return f.fds[idx].Load(), nil
	}
	if f.closed.Load() { // raced with Close
		if f.fds[idx].CompareAndSwap(fd, nil) {
			fd.Close()
		}
		return nil, os.ErrClosed
	}
	return fd, nil
}

// Prefetch fetches the chunks of [off, off+n) in the background with a few
// parallel GETs. The channel gets the first error (nil when every chunk
// is local) and is closed.
func (f *LazyFile) Prefetch(ctx context.Context, off, n int64) <-chan error {
	out := make(chan error, 1)
	if off < 0 {
		off = 0
	}
	end := min(off+n, f.size)
	var todo []int64
	for idx := off / f.cs; idx*f.cs < end; idx++ {
		if f.sums[idx] != "" && f.fds[idx].Load() == nil {
			todo = append(todo, idx)
		}
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer close(out)
		out <- f.fetchAll(ctx, todo)
	}()
	return out
}

func (f *LazyFile) fetchAll(ctx context.Context, todo []int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(f.ctx, cancel)
	defer stop()
	work := make(chan int64)
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range min(prefetchWorkers, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idx := range work {
				if _, _, err := f.chunk(ctx, idx); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
feed:
	for _, idx := range todo {
		select {
		case work <- idx:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}

// warmTimeout bounds a Warm.
const warmTimeout = time.Minute

// Warm fetches the chunks of rm's file path into the cache in the
// background, pinned until they are all here: a restore about to stream
// the file finds them here or in flight. Errors are left to the reads that
// need the chunks.
func (c *Cache) Warm(rm *RemoteManifest, path string) {
	ctx, cancel := context.WithTimeout(context.Background(), warmTimeout)
	lf, err := c.Open(ctx, rm, path)
	if err != nil {
		cancel()
		return
	}
	done := lf.Prefetch(ctx, 0, lf.Size())
	go func() {
		<-done
		lf.Close()
		cancel()
	}()
}

// Close unpins the file's chunks and closes its descriptors; running
// prefetches are cancelled and waited for.
func (f *LazyFile) Close() error {
	if f.closed.Swap(true) {
		return nil
	}
	f.cancel()
	f.wg.Wait()
	f.writesMu.Lock()
	writes := f.writes
	f.writesMu.Unlock()
	for _, fl := range writes {
		<-fl.written
	}
	for i := range f.fds {
		if fd := f.fds[i].Swap(nil); fd != nil {
			fd.Close()
		}
	}
	f.c.unpin(f.pinned)
	return nil
}
