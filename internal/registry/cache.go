package registry

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/thaw-dev/thaw/internal/registry/chunk"
)

// Cache is the node's local chunk cache, <data-dir>/chunks/<aa>/<sha256>:
// chunks uncompressed, each verified against its name before it is
// written (temporary file, then rename) and, for chunks found on disk at
// start, once more before first use. It keeps at most Budget bytes by
// evicting the least recently used chunks, except chunks pinned by an open
// LazyFile, which are never evicted (the cache may exceed its budget by
// what is pinned).
type Cache struct {
	dir    string
	budget int64
	store  *Store

	mu      sync.Mutex
	entries map[string]*entry
	lru     *list.List // *entry, most recently used first
	used    int64
	pins    map[string]int
	flights map[string]*flight

	fetchedBytes  atomic.Int64 // compressed bytes read from the store
	fetchedChunks atomic.Int64
	hits          atomic.Int64
}

type entry struct {
	sum      string
	size     int64
	elem     *list.Element
	verified bool // hashed in this process
}

// flight is one fetch (or check on disk) of a chunk that callers share.
type flight struct {
	done chan struct{} // closed when data (or err) is set
	err  error
	// data: the chunk's bytes, fetched and verified, while they are written
	// to disk in the background (nil when the chunk was verified on disk);
	// written is closed when that write ended (werr: it failed).
	data    []byte
	written chan struct{}
	werr    error
}

// CacheStats are the cache's counters since it was opened.
type CacheStats struct {
	FetchedBytes  int64 `json:"fetched_bytes"`  // compressed bytes read from the store
	FetchedChunks int64 `json:"fetched_chunks"` // chunks read from the store
	Hits          int64 `json:"hits"`           // chunk lookups served from disk
	Chunks        int   `json:"chunks"`         // chunks on disk
	UsedBytes     int64 `json:"used_bytes"`
	PinnedChunks  int   `json:"pinned_chunks"`
	BudgetBytes   int64 `json:"budget_bytes"`
}

// OpenCache opens (creating) the cache in dir with a budget in bytes
// (0: no bound). store may be nil: only chunks on disk are then served.
// Leftover temporaries of a crash are removed.
func OpenCache(dir string, budget int64, store *Store) (*Cache, error) {
	if budget < 0 {
		return nil, fmt.Errorf("chunk cache budget %d: must not be negative", budget)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("chunk cache: %w", err)
	}
	c := &Cache{dir: dir, budget: budget, store: store, entries: map[string]*entry{}, lru: list.New(),
		pins: map[string]int{}, flights: map[string]*flight{}}
	type found struct {
		sum  string
		size int64
		at   int64
	}
	var all []found
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		name := d.Name()
		if strings.HasPrefix(name, ".tmp-") {
			return os.Remove(p) // a write a crash interrupted
		}
		if !hexSum.MatchString(name) || filepath.Base(filepath.Dir(p)) != name[:2] {
			return nil // not a chunk: not the cache's to count or delete
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		all = append(all, found{name, fi.Size(), fi.ModTime().UnixNano()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("chunk cache: %w", err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].at > all[j].at })
	for _, f := range all {
		e := &entry{sum: f.sum, size: f.size}
		e.elem = c.lru.PushBack(e)
		c.entries[f.sum] = e
		c.used += f.size
	}
	c.mu.Lock()
	c.evictLocked()
	c.mu.Unlock()
	return c, nil
}

// Dir is the cache directory.
func (c *Cache) Dir() string { return c.dir }

// Stats returns the counters.
func (c *Cache) Stats() CacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{FetchedBytes: c.fetchedBytes.Load(), FetchedChunks: c.fetchedChunks.Load(), Hits: c.hits.Load(),
		Chunks: len(c.entries), UsedBytes: c.used, PinnedChunks: len(c.pins), BudgetBytes: c.budget}
}

func (c *Cache) path(sum string) string { return filepath.Join(c.dir, sum[:2], sum) }

// pin keeps the chunks from eviction until unpin.
func (c *Cache) pin(sums []string) {
	c.mu.Lock()
	for _, s := range sums {
		c.pins[s]++
	}
	c.mu.Unlock()
}

func (c *Cache) unpin(sums []string) {
	c.mu.Lock()
	for _, s := range sums {
		if c.pins[s]--; c.pins[s] <= 0 {
			delete(c.pins, s)
		}
	}
	c.evictLocked()
	c.mu.Unlock()
}

// evictLocked removes least recently used, unpinned chunks until the
// cache fits its budget.
func (c *Cache) evictLocked() {
	if c.budget == 0 {
		return
	}
	for el := c.lru.Back(); el != nil && c.used > c.budget; {
		e := el.Value.(*entry)
		prev := el.Prev()
		if c.pins[e.sum] == 0 {
			if err := os.Remove(c.path(e.sum)); err == nil || errors.Is(err, fs.ErrNotExist) {
				c.lru.Remove(el)
				delete(c.entries, e.sum)
				c.used -= e.size
			}
		}
		el = prev
	}
}

// Has reports whether the chunk is on disk.
func (c *Cache) Has(sum string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries[sum] != nil
}

// ensure makes the chunk sum of size bytes present and verified,
// fetching it from the store if needed; concurrent callers for one chunk
// share one fetch. It says what this call did: the compressed bytes it
// fetched, or hit when the chunk was on disk. A fetched chunk is answered
// before it is on disk: fl holds its bytes while they are written (a read
// need not wait for the write); fl is nil when the chunk is on disk.
func (c *Cache) ensure(ctx context.Context, sum string, size int) (fetched int64, hit bool, fl *flight, err error) {
	c.mu.Lock()
	if e := c.entries[sum]; e != nil && e.verified {
		c.lru.MoveToFront(e.elem)
		c.mu.Unlock()
		c.hits.Add(1)
		return 0, true, nil, nil
	}
	if f := c.flights[sum]; f != nil {
		c.mu.Unlock()
		select {
		case <-f.done:
			if f.err != nil || f.data == nil {
				return 0, false, nil, f.err
			}
			return 0, false, f, nil
		case <-ctx.Done():
			return 0, false, nil, ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{}), written: make(chan struct{})}
	c.flights[sum] = f
	e := c.entries[sum]
	c.mu.Unlock()

	fetched, hit, f.err = c.load(ctx, sum, size, e != nil, f)
	if f.err != nil || f.data == nil {
		c.endFlight(sum, f)
		close(f.done)
		return fetched, hit, nil, f.err
	}
	close(f.done)
	go func() { // the write, off the reader's path
		f.werr = c.insert(sum, f.data)
		c.endFlight(sum, f)
	}()
	return fetched, false, f, nil
}

// endFlight forgets a flight and marks its write ended.
func (c *Cache) endFlight(sum string, f *flight) {
	c.mu.Lock()
	delete(c.flights, sum)
	c.mu.Unlock()
	close(f.written)
}

// load verifies a chunk found on disk (onDisk) or fetches it into f.data.
func (c *Cache) load(ctx context.Context, sum string, size int, onDisk bool, f *flight) (int64, bool, error) {
	if onDisk {
		b, err := os.ReadFile(c.path(sum))
		if err == nil && len(b) == size && chunk.SumHex(b) == sum {
			c.mu.Lock()
			if e := c.entries[sum]; e != nil {
				e.verified = true
				c.lru.MoveToFront(e.elem)
			}
			c.mu.Unlock()
			c.hits.Add(1)
			return 0, true, nil
		}
		c.drop(sum) // damaged on disk: fetch it again
	}
	if c.store == nil {
		return 0, false, fmt.Errorf("%w: chunk %s is not cached and no registry is configured", ErrNotFound, sum[:12])
	}
	buf := make([]byte, size)
	n, err := c.store.fetchChunk(ctx, sum, buf, nil)
	c.fetchedBytes.Add(n)
	if err != nil {
		return n, false, err
	}
	c.fetchedChunks.Add(1)
	f.data = buf
	return n, false, nil
}

// insert writes a verified chunk: temporary file, then rename.
func (c *Cache) insert(sum string, data []byte) error {
	p := c.path(sum)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".tmp-")
	if err != nil {
		return fmt.Errorf("chunk cache: %w", err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), p)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("chunk cache: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.entries[sum]; old != nil {
		c.lru.Remove(old.elem)
		c.used -= old.size
	}
	e := &entry{sum: sum, size: int64(len(data)), verified: true}
	e.elem = c.lru.PushFront(e)
	c.entries[sum] = e
	c.used += e.size
	c.evictLocked()
	return nil
}

func (c *Cache) drop(sum string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.entries[sum]; e != nil {
		c.lru.Remove(e.elem)
		delete(c.entries, sum)
		c.used -= e.size
	}
	_ = os.Remove(c.path(sum))
}
