package chunk

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Measure is what storing a set of snapshots at one chunk size costs.
type Measure struct {
	ChunkSize int64 `json:"chunk_size"`
	Snapshots int   `json:"snapshots"`
	// FileBytes is the apparent size of every file of every snapshot.
	FileBytes int64 `json:"file_bytes"`
	// ChunkBytes is the bytes of every non-zero chunk of every snapshot
	// (what storing them without sharing would hold, uncompressed).
	ChunkBytes int64 `json:"chunk_bytes"`
	Chunks     int64 `json:"chunks"`
	// UniqueChunks and UniqueBytes are the distinct chunks (the objects in
	// the store) and their uncompressed bytes; StoredBytes their
	// compressed bytes (what the bucket holds).
	UniqueChunks int64 `json:"unique_chunks"`
	UniqueBytes  int64 `json:"unique_bytes"`
	StoredBytes  int64 `json:"stored_bytes"`
	// DedupRatio is ChunkBytes / UniqueBytes.
	DedupRatio float64 `json:"dedup_ratio"`
	// MeanSnapshotBytes is a snapshot's non-zero bytes counted in 4 KiB
	// pages (independent of the chunk size), the mean over the snapshots;
	// StoredPerSnapshot is StoredBytes over it: how many snapshots' worth
	// the whole set costs in the bucket.
	MeanSnapshotBytes int64   `json:"mean_snapshot_bytes"`
	StoredPerSnapshot float64 `json:"stored_per_snapshot"`
	// Objects is UniqueChunks plus one manifest per snapshot.
	Objects int64 `json:"objects"`
	// A lazy restore fetches the chunks its guest touches. Over the
	// snapshots with a working set (WorkingSetSnapshots; the remote
	// strategy's, which a lazy restore fetches before the guest runs):
	// WorkingSetBytes are the bytes of its pages inside non-zero chunks, WorkingSetChunks the
	// memory chunks holding them (GETs), WorkingSetFetchBytes those
	// chunks' bytes, all summed.
	WorkingSetSnapshots  int   `json:"working_set_snapshots"`
	WorkingSetBytes      int64 `json:"working_set_bytes"`
	WorkingSetChunks     int64 `json:"working_set_chunks"`
	WorkingSetFetchBytes int64 `json:"working_set_fetch_bytes"`
}

// MeasureSnapshots chunks every file of the snapshots in dirs at chunk size
// cs as a push would (zero chunks left out, SHA-256 names, zstd) and
// counts what the store would hold, and what fetching each one's working
// set (prefetched; nil: none) costs.
func MeasureSnapshots(dirs []string, cs int64, prefetched Prefetched) (*Measure, error) {
	if cs < MinSize || cs > MaxSize || cs&(cs-1) != 0 {
		return nil, fmt.Errorf("chunk size %d: a power of two from %d to %d", cs, MinSize, MaxSize)
	}
	m := &Measure{ChunkSize: cs, Snapshots: len(dirs)}
	c := newChunkCounter(m)
	c.prefetched = prefetched
	var err error
	for _, dir := range dirs {
		if err = c.snapshot(dir, cs); err != nil {
			break
		}
	}
	stored := c.close()
	if err != nil {
		return nil, err
	}
	m.StoredBytes = stored
	m.Objects = m.UniqueChunks + int64(len(dirs))
	if m.UniqueBytes > 0 {
		m.DedupRatio = float64(m.ChunkBytes) / float64(m.UniqueBytes)
	}
	if len(dirs) > 0 {
		m.MeanSnapshotBytes = c.pageBytes / int64(len(dirs))
	}
	if m.MeanSnapshotBytes > 0 {
		m.StoredPerSnapshot = float64(m.StoredBytes) / float64(m.MeanSnapshotBytes)
	}
	return m, nil
}

// chunkCounter counts the chunks of snapshots into m, compressing each
// distinct one with a worker per CPU to learn what it would store.
type chunkCounter struct {
	m          *Measure
	seen       map[string]bool
	jobs       chan []byte
	wg         sync.WaitGroup
	mu         sync.Mutex
	stored     int64
	pageBytes  int64
	prefetched Prefetched
}

func newChunkCounter(m *Measure) *chunkCounter {
	c := &chunkCounter{m: m, seen: map[string]bool{}, jobs: make(chan []byte, 8)}
	for range runtime.NumCPU() {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			var buf []byte
			for data := range c.jobs {
				buf = Compress(buf, data)
				c.mu.Lock()
				c.stored += int64(len(buf))
				c.mu.Unlock()
			}
		}()
	}
	return c
}

// close waits for the compressions and returns the bytes they stored.
func (c *chunkCounter) close() int64 {
	close(c.jobs)
	c.wg.Wait()
	return c.stored
}

// snapshot counts the files of the snapshot in dir, then its working set.
func (c *chunkCounter) snapshot(dir string, cs int64) error {
	if _, err := snapshot.ReadManifest(dir); err != nil {
		return err
	}
	files, err := SnapshotFiles(dir)
	if err != nil {
		return err
	}
	m := c.m
	memChunks := map[int64]int64{} // non-zero memory chunk index -> its length
	for _, rel := range files {
		size, _, err := Scan(filepath.Join(dir, rel), cs, func(idx int64, data []byte) error {
			if rel == snapshot.MemoryFile {
				memChunks[idx] = int64(len(data))
			}
			m.Chunks++
			c.pageBytes += nonZeroPageBytes(data)
			m.ChunkBytes += int64(len(data))
			if sum := SumHex(data); !c.seen[sum] {
				c.seen[sum] = true
				m.UniqueChunks++
				m.UniqueBytes += int64(len(data))
				c.jobs <- append([]byte(nil), data...)
			}
			return nil
		})
		if err != nil {
			return err
		}
		m.FileBytes += size
	}
	return m.addWorkingSet(dir, cs, memChunks, c.prefetched)
}

// nonZeroPageBytes is the bytes of the 4 KiB pages of data that hold a
// non-zero byte.
func nonZeroPageBytes(data []byte) int64 {
	var n int64
	for off := 0; off < len(data); off += 4096 {
		if p := data[off:min(off+4096, len(data))]; !IsZero(p) {
			n += int64(len(p))
		}
	}
	return n
}

// Prefetched lists the memory pages a lazy restore of the snapshot in
// dir fetches before its guest runs (its strategy's working set), as runs
// of [first page, count] of pageSize bytes; an error wrapping
// os.ErrNotExist when the snapshot has none.
type Prefetched func(dir string) (pageSize int64, runs [][2]int64, err error)

// addWorkingSet counts what fetching the working set of the snapshot in
// dir lazily costs at chunk size cs (nothing without one).
func (m *Measure) addWorkingSet(dir string, cs int64, memChunks map[int64]int64, prefetched Prefetched) error {
	if prefetched == nil {
		return nil
	}
	pageSize, runs, err := prefetched(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err == nil && pageSize <= 0 {
		err = fmt.Errorf("page size %d", pageSize)
	}
	if err != nil {
		return fmt.Errorf("%s: working set: %w", dir, err)
	}
	ws := struct {
		PageSize int64
		Pages    [][2]int64
	}{pageSize, runs}
	m.WorkingSetSnapshots++
	touched := map[int64]bool{}
	for _, r := range ws.Pages {
		for p := r[0]; p < r[0]+r[1]; p++ {
			idx := p * ws.PageSize / cs
			if _, ok := memChunks[idx]; ok {
				m.WorkingSetBytes += ws.PageSize
				touched[idx] = true
			}
		}
	}
	for idx := range touched {
		m.WorkingSetChunks++
		m.WorkingSetFetchBytes += memChunks[idx]
	}
	return nil
}
