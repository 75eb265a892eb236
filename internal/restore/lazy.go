package restore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/uffd"
	"github.com/thaw-dev/thaw/wire"
)

// Lazy restore: the snapshot's memory file is not on this host; its bytes
// come from a MemorySource (a lazily filled copy of the file in an object
// store) and reach the guest only through userfaultfd, page by page as the
// guest faults them, after what the strategy installs from its local
// artifacts (docs/design.md, "Lazy restore").

// MemorySource serves a snapshot's guest memory that is not in a local
// file. ReadAt may block while bytes are fetched; holes and bytes beyond
// Size read as zeros. It must be safe for concurrent use.
type MemorySource interface {
	ReadAt(p []byte, off int64) (int, error)
	Size() int64
	// Prefetch starts fetching [off, off+n) in the background.
	Prefetch(ctx context.Context, off, n int64)
	// SourceStats are the source's counters so far.
	SourceStats() SourceStats
}

// LazyStats: what a lazy restore read, and from where.
type LazyStats = wire.LazyStats

// SourceStats are a MemorySource's counters: what it fetched from its
// store and what it answered from its cache.
type SourceStats struct {
	FetchedBytes  uint64
	FetchedChunks uint64
	CacheHits     uint64
	FetchTime     time.Duration // summed over the fetches (parallel ones overlap)
}

// ErrNeedsLocalMemory is wrapped by the error of a strategy that cannot
// restore from a MemorySource (NeedsLocalError).
var ErrNeedsLocalMemory = errors.New("needs the snapshot's memory file on this host")

// NeedsLocalError: the strategy maps or reads the whole memory file
// (cached, premap, snapbpf); pull the snapshot, then restore.
type NeedsLocalError struct {
	Kind     Kind
	Snapshot string
}

func (e *NeedsLocalError) Error() string {
	return fmt.Sprintf("restore strategy %s needs the whole memory file of snapshot %s on this host: pull the snapshot first",
		e.Kind, e.Snapshot)
}

func (e *NeedsLocalError) Unwrap() error { return ErrNeedsLocalMemory }

// checkLazy checks a lazy restore's snapshot: the source and the
// placeholder QEMU opens both have the memory file's size.
func checkLazy(snap Snapshot) error {
	want := memSize(snap)
	if got := snap.Source.Size(); got != want {
		return fmt.Errorf("memory source holds %d bytes, the snapshot's memory file %d", got, want)
	}
	st, err := os.Stat(snap.MemoryPath())
	if err != nil {
		return fmt.Errorf("memory placeholder: %w", err)
	}
	if !st.Mode().IsRegular() || st.Size() != want {
		return fmt.Errorf("memory placeholder %s: %d bytes (%s), want a regular file of %d", snap.MemoryPath(), st.Size(), st.Mode(), want)
	}
	return nil
}

// pageSource is what the fault server reads a lazy restore's pages from:
// the MemorySource, except (FaaSnap) pages of the local loading-set file
// and pages the artifact knows are zero. It counts where each read went.
type pageSource struct {
	src   MemorySource
	start SourceStats // the source's counters when the restore began

	ls      io.ReaderAt         // loading-set file (local, or streamed: lsSrc), or nil
	lsFile  *os.File            // the local loading-set file, or nil
	lsSrc   MemorySource        // the streamed loading set, or nil
	lsStart SourceStats         // lsSrc's counters when the restore began
	lsIndex []lsPage            // its regions sorted by guest page
	nonzero []memlayout.PageRun // the memory file's non-zero regions, nil if unknown

	srcReads, srcBytes, lsReads, zeroReads atomic.Uint64
	srcNS                                  atomic.Int64
}

type lsPage struct{ start, pages, fileOff uint64 }

// newPageSource wraps src (nil: nil, faults read the memory file).
func newPageSource(src MemorySource) *pageSource {
	if src == nil {
		return nil
	}
	return &pageSource{src: src, start: src.SourceStats()}
}

// withLoadingSet serves the loading set's pages from its local file (or
// from remote, streamed) and the pages outside art's non-zero regions as
// zeros.
func (p *pageSource) withLoadingSet(art *memlayout.FaaSnapArtifact, lsPath string, remote MemorySource) error {
	if remote != nil {
		if remote.Size() != art.LoadingSetFile.Size {
			return fmt.Errorf("loading-set source holds %d bytes, the artifact names %d", remote.Size(), art.LoadingSetFile.Size)
		}
		p.ls, p.lsSrc, p.lsStart = remote, remote, remote.SourceStats()
	} else {
		f, err := os.Open(lsPath)
		if err != nil {
			return err
		}
		p.ls, p.lsFile = f, f
	}
	p.nonzero = art.NonzeroRegions
	for _, l := range art.LoadingRegions {
		p.lsIndex = append(p.lsIndex, lsPage{l.Start, l.Pages, l.FileOff})
	}
	sort.Slice(p.lsIndex, func(i, j int) bool { return p.lsIndex[i].start < p.lsIndex[j].start })
	return nil
}

func (p *pageSource) Size() int64 { return p.src.Size() }

// ReadAt answers the fault server's page reads.
func (p *pageSource) ReadAt(b []byte, off int64) (int, error) {
	if off%snapshot.PageSize == 0 && len(b) == snapshot.PageSize && off < p.src.Size() {
		page := uint64(off) / snapshot.PageSize
		if l, ok := p.inLoadingSet(page); ok {
			p.lsReads.Add(1)
			n, err := p.ls.ReadAt(b, int64(l.fileOff+(page-l.start)*snapshot.PageSize))
			if err != nil {
				err = fmt.Errorf("loading-set file: %w", err)
			}
			return n, err
		}
		if p.nonzero != nil && memlayout.FindRegion(p.nonzero, page) < 0 {
			p.zeroReads.Add(1)
			clear(b)
			return len(b), nil
		}
	}
	t := time.Now()
	n, err := p.src.ReadAt(b, off)
	p.srcNS.Add(int64(time.Since(t)))
	p.srcReads.Add(1)
	p.srcBytes.Add(uint64(n))
	return n, err
}

// fetcher is a MemorySource that can tell whether a read would fetch, and
// fetch ahead of the read; faults on such a source are served
// concurrently (uffd.AsyncSource).
type fetcher interface {
	Local(off int64) bool
	Fetch(off int64) error
}

// route says which source a page read at off goes to and where in it;
// nil: a local file or a zero page (never waits).
func (p *pageSource) route(off int64) (fetcher, int64) {
	if off%snapshot.PageSize != 0 || off >= p.src.Size() {
		return nil, 0
	}
	page := uint64(off) / snapshot.PageSize
	if l, ok := p.inLoadingSet(page); ok {
		f, _ := p.lsSrc.(fetcher)
		return f, int64(l.fileOff + (page-l.start)*snapshot.PageSize)
	}
	if p.nonzero != nil && memlayout.FindRegion(p.nonzero, page) < 0 {
		return nil, 0
	}
	f, _ := p.src.(fetcher)
	return f, off
}

// Local reports whether the page at off is read without a fetch.
func (p *pageSource) Local(off int64) bool {
	f, at := p.route(off)
	return f == nil || f.Local(at)
}

// Fetch fetches the page at off ahead of its read.
func (p *pageSource) Fetch(off int64) error {
	if f, at := p.route(off); f != nil {
		return f.Fetch(at)
	}
	return nil
}

func (p *pageSource) inLoadingSet(page uint64) (lsPage, bool) {
	i := sort.Search(len(p.lsIndex), func(i int) bool { return p.lsIndex[i].start+p.lsIndex[i].pages > page })
	if i < len(p.lsIndex) && p.lsIndex[i].start <= page {
		return p.lsIndex[i], true
	}
	return lsPage{}, false
}

// stats fills the lazy part of a session's stats.
func (p *pageSource) stats(st *LazyStats) {
	now := p.src.SourceStats()
	*st = LazyStats{Lazy: true, SourceFaults: p.srcReads.Load(), SourceBytes: p.srcBytes.Load(),
		SourceReadMS:       msOf(time.Duration(p.srcNS.Load())),
		SourceFetchedBytes: now.FetchedBytes - p.start.FetchedBytes, SourceFetchedChunks: now.FetchedChunks - p.start.FetchedChunks,
		SourceCacheHits: now.CacheHits - p.start.CacheHits, SourceFetchMS: msOf(now.FetchTime - p.start.FetchTime),
		LoadingSetFaults: p.lsReads.Load(), ZeroFaults: p.zeroReads.Load(),
		LoaderPages: st.LoaderPages, LoaderExisting: st.LoaderExisting}
	if p.lsSrc != nil {
		ls := p.lsSrc.SourceStats()
		st.LoadingSetFetchedBytes = ls.FetchedBytes - p.lsStart.FetchedBytes
		st.LoadingSetFetchedChunks = ls.FetchedChunks - p.lsStart.FetchedChunks
	}
}

func (p *pageSource) close() {
	if p != nil && p.lsFile != nil {
		p.lsFile.Close()
	}
}

var _ uffd.AsyncSource = (*pageSource)(nil)
