package restore

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// SnapBPF maps the memory file like vanilla and prefetches the working set
// captured in the kernel by an eBPF program (prepare) from that same file
// into the page cache, concurrently with the guest (HotStorage'25).
const SnapBPF Kind = "snapbpf"

// SnapBPFStats: the prefetch of one restore.
type SnapBPFStats struct {
	SnapBPFRanges         int     `json:"snapbpf_ranges,omitempty" unit:"count" desc:"prefetch ranges (capture order)"`
	SnapBPFPages          uint64  `json:"snapbpf_pages,omitempty" unit:"pages" desc:"pages they hold"`
	SnapBPFReadaheadCalls int     `json:"snapbpf_readahead_calls,omitempty" unit:"count" desc:"readahead(2) calls, re-issues included"`
	SnapBPFIssueMS        float64 `json:"snapbpf_issue_ms,omitempty" unit:"ms" desc:"first pass of readahead calls"`
	SnapBPFResidentPages  uint64  `json:"snapbpf_resident_pages,omitempty" unit:"pages" desc:"prefetch pages resident at the last mincore check"`
	SnapBPFResidentMS     float64 `json:"snapbpf_resident_ms,omitempty" unit:"ms" desc:"until mincore saw every page resident"`
	SnapBPFFinishedFirst  *bool   `json:"snapbpf_finished_first,omitempty" desc:"all resident before the invocation answered"`
	SnapBPFError          string  `json:"snapbpf_error,omitempty" desc:"the prefetch failed (the guest still runs, as vanilla)"`
}

// SnapBPFManifest is the snapbpf artifact (memlayout.WriteSnapBPF); there
// is no data file.
const SnapBPFManifest = memlayout.SnapBPFManifestFile

// snapbpf restores like vanilla while the daemon reads the captured working
// set of the same file into the page cache with readahead(2), in capture
// order, chunked, re-issuing what mincore shows missing (SnapBPF issues it
// from eBPF, which these kernels do not allow; docs/design.md, snapbpf).
type snapbpf struct {
	sessionBase
	snap   Snapshot
	art    *memlayout.SnapBPFArtifact
	cancel context.CancelFunc
	done   chan struct{}

	mu            sync.Mutex
	st            SnapBPFStats
	finished      bool
	finishedFirst *bool
}

// prefetchChunk is the largest readahead request: the kernel's own chunk in
// force_page_cache_ra (2 MiB).
const prefetchChunk = 2 << 20

// residencyTimeout bounds how long the prefetcher waits for its pages to
// become resident (memory pressure could evict them again).
const residencyTimeout = 10 * time.Second

// residencyPoll is the interval between mincore checks (each walks every
// range: keep it coarse on a host whose CPUs also run the guest).
const residencyPoll = 5 * time.Millisecond

func beginSnapBPF(_ context.Context, snap Snapshot, env Env) (Session, error) {
	art, err := memlayout.ReadSnapBPF(snap.ArtifactDir(SnapBPF))
	if err != nil {
		return nil, err
	}
	if err := art.Verify(memSize(snap), memSHA(snap)); err != nil {
		return nil, err
	}
	// The prefetch outlives the request that started it only until Close.
	ctx, cancel := context.WithCancel(context.Background())
	s := &snapbpf{sessionBase: base(env), snap: snap, art: art, cancel: cancel, done: make(chan struct{})}
	s.st.SnapBPFRanges = len(art.Ranges)
	s.st.SnapBPFPages = art.PrefetchPages()
	go s.prefetch(ctx)
	return s, nil
}

func (s *snapbpf) Kind() Kind { return SnapBPF }

func (s *snapbpf) Memory() vmm.Memory {
	return s.protected(vmm.Memory{Path: s.snap.MemoryPath(), Shared: false})
}

func (s *snapbpf) InvocationDone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finishedFirst == nil {
		done := s.finished
		s.finishedFirst = &done
	}
}

func (s *snapbpf) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.SnapBPFFinishedFirst = s.finishedFirst
	return withPart(Stats{DaemonReadBytes: st.SnapBPFResidentPages * memlayout.PageSize, FetchMS: st.SnapBPFResidentMS,
		FetchBytes: st.SnapBPFPages * memlayout.PageSize}, SnapBPF, st)
}

func (s *snapbpf) Close() error {
	s.cancel()
	<-s.done
	return nil
}

// prefetch issues readahead for every range in capture order, then checks
// residency with mincore, re-issuing what is missing, until all of it is
// resident, the session closes or residencyTimeout passes.
func (s *snapbpf) prefetch(ctx context.Context) {
	defer close(s.done)
	defer func() {
		s.mu.Lock()
		s.finished = true
		s.mu.Unlock()
	}()
	start := time.Now()
	f, err := os.Open(s.snap.MemoryPath())
	if err != nil {
		s.fail(err)
		return
	}
	defer f.Close()
	m, err := unix.Mmap(int(f.Fd()), 0, int(memSize(s.snap)), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		s.fail(fmt.Errorf("map memory for mincore: %w", err))
		return
	}
	defer unix.Munmap(m)
	calls, err := s.issueWindowed(ctx, f, m)
	s.mu.Lock()
	s.st.SnapBPFReadaheadCalls += calls
	s.st.SnapBPFIssueMS = msSince(start)
	s.mu.Unlock()
	if err != nil {
		s.fail(err)
		return
	}
	deadline := time.Now().Add(residencyTimeout)
	var last uint64
	for {
		missing, resident, err := pagecache.Residency(m, s.art.Ranges)
		s.mu.Lock()
		s.st.SnapBPFResidentPages = resident
		s.mu.Unlock()
		if err != nil {
			s.fail(err)
			return
		}
		if len(missing) == 0 {
			s.mu.Lock()
			s.st.SnapBPFResidentMS = msSince(start)
			s.mu.Unlock()
			return
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return
		}
		// mincore counts a page whose read is still in flight as missing,
		// so ask again only when a whole interval brought nothing new: the
		// kernel dropped or capped a request (or evicted pages again).
		if resident == last {
			calls, err := pagecache.Readahead(f, prefetchChunk, missing)
			s.mu.Lock()
			s.st.SnapBPFReadaheadCalls += calls
			s.mu.Unlock()
			if err != nil {
				s.fail(err)
				return
			}
		}
		last = resident
		select {
		case <-ctx.Done():
			return
		case <-time.After(residencyPoll):
		}
	}
}

// issueWindowed issues the ranges in capture order, one chunk per call,
// keeping at most prefetchWindow chunks in flight: before chunk i it waits
// (briefly) until chunk i-prefetchWindow is resident. Issuing everything
// at once would queue the whole working set on the device ahead of the
// guest's own demand faults and of QEMU's start-up; a bounded window keeps
// the stream in capture order and the queue short.
func (s *snapbpf) issueWindowed(ctx context.Context, f *os.File, m []byte) (int, error) {
	chunks := pagecache.SplitRuns(s.art.Ranges, prefetchChunk/memlayout.PageSize)
	calls := 0
	for i, c := range chunks {
		if i >= prefetchWindow {
			waitResident(ctx, m, chunks[i-prefetchWindow])
		}
		n, err := pagecache.Readahead(f, prefetchChunk, []memlayout.PageRun{c})
		calls += n
		if err != nil {
			return calls, err
		}
	}
	return calls, nil
}

// prefetchWindow is how many chunks may be in flight (16 x 2 MiB).
const prefetchWindow = 16

// waitResident polls until every page of r is resident, for at most
// chunkWait.
func waitResident(ctx context.Context, m []byte, r memlayout.PageRun) {
	const chunkWait = 50 * time.Millisecond
	deadline := time.Now().Add(chunkWait)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		missing, _, err := pagecache.Residency(m, []memlayout.PageRun{r})
		if err != nil || len(missing) == 0 {
			return
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (s *snapbpf) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.st.SnapBPFError = err.Error()
}

func msSince(t time.Time) float64 { return msOf(time.Since(t)) }

var snapbpfStrategy = Strategy{Kind: SnapBPF, Begin: beginSnapBPF, Fallback: true, Record: recordSnapBPF, Auto: true, AutoOrder: 3,
	Ready: hasArtifact(SnapBPF, SnapBPFManifest), Refresh: refreshSnapBPF, StatsPart: SnapBPFStats{}, BuildPart: SnapBPFBuild{},
	Artifacts: []Artifact{{Name: SnapBPFManifest, Required: true}}}
