package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	capture "github.com/thaw-dev/thaw/internal/snapbpf"
)

// SnapBPFBuild summarizes the SnapBPF capture on the warm snapshot and the
// prefetch plan written from it.
type SnapBPFBuild struct {
	// Events are the page-cache insertions (folios) of the warm memory
	// file the eBPF program saw during the record invocation; Dropped
	// those that did not fit in its buffer.
	Events  uint64 `json:"events" unit:"count" desc:"page-cache insertions of the warm memory file seen during the record invocation"`
	Dropped uint64 `json:"dropped" unit:"count" desc:"insertions that did not fit in the capture buffer"`
	// CapturedPages: distinct pages of the memory file those insertions
	// held, host readahead included.
	CapturedPages uint64 `json:"captured_pages" unit:"pages" desc:"distinct memory-file pages those insertions held"`
	// FreePagesFiltered: captured pages in holes of the warm memory file;
	// not prefetched.
	FreePagesFiltered uint64 `json:"free_pages_filtered" unit:"pages" desc:"captured pages in holes of the memory file, not prefetched"`
	// PrefetchPages and Ranges: what a snapbpf restore reads ahead.
	PrefetchPages uint64 `json:"prefetch_pages" unit:"pages" desc:"what a snapbpf restore reads ahead"`
	Ranges        int    `json:"ranges" unit:"count" desc:"prefetch ranges"`
	// REAPOverlapPages: prefetch pages that are also in REAP's recorded
	// working set (pages the guest really touched).
	REAPOverlapPages uint64 `json:"reap_overlap_pages" unit:"pages" desc:"prefetch pages also in the recorded fault working set"`
	// CaptureMS: program attached to detached (restore, record invocation).
	CaptureMS float64 `json:"capture_ms" unit:"ms" desc:"capture program attached to detached"`
}

// recordSnapBPF is SnapBPF's capture on the warm snapshot: the warm memory
// file is evicted from the page cache, the capture program is attached for
// its inode, the warm snapshot is restored exactly as vanilla restores it
// and runs the record invocation; every folio that entered the page cache
// meanwhile is recorded in order. The plan (free pages filtered, runs
// coalesced) goes to strategies/snapbpf/snapbpf.json. A host that cannot
// capture skips it and says why; the other strategies are prepared anyway.
//
// The capture keeps the kernel's readahead: it records what a vanilla cold
// start brings into the page cache (docs/design.md, snapbpf).
func recordSnapBPF(ctx context.Context, h RecordHost, p *Prepare) error {
	if err := capture.Check(p.Options.SnapBPFObject); err != nil {
		p.Step(SnapBPF).Unavailable = fmt.Sprintf("snapbpf capture unavailable: %v", err)
		if p.Log != nil {
			p.Log.Warn("snapbpf capture unavailable; preparing the other strategies", "err", err)
		}
		return nil
	}
	t := time.Now()
	mem := p.Warm.MemoryPath()
	res, err := captureSnapBPF(ctx, h, p.Warm, p.Options.SnapBPFObject)
	if err != nil {
		return err
	}
	p.Step(SnapBPF).RecordMS = msOf(time.Since(t))
	t = time.Now()
	art, err := memlayout.WriteSnapBPF(p.Warm.ArtifactDir(SnapBPF), mem, memSHA(p.Warm), res.Pages(),
		uint64(len(res.Events)), res.Dropped)
	if err != nil {
		return fmt.Errorf("build artifact: %w", err)
	}
	b := &SnapBPFBuild{Events: res.Seen, Dropped: res.Dropped, CapturedPages: art.Capture.Pages,
		FreePagesFiltered: art.Capture.FreePages, PrefetchPages: art.PrefetchPages(), Ranges: len(art.Ranges),
		CaptureMS: msOf(res.Elapsed)}
	touched := make(map[uint64]bool, len(p.Touched))
	for _, pg := range p.Touched {
		touched[pg] = true
	}
	for _, r := range art.Ranges {
		for pg := r.Start; pg < r.End(); pg++ {
			if touched[pg] {
				b.REAPOverlapPages++
			}
		}
	}
	p.SetBuild(SnapBPF, b)
	p.Step(SnapBPF).BuildMS = msOf(time.Since(t))
	return nil
}

// captureSnapBPF evicts snap's memory file, attaches the capture program
// for it, restores snap exactly as vanilla does and runs the record
// invocation: what entered the page cache meanwhile, in order.
func captureSnapBPF(ctx context.Context, h RecordHost, snap Snapshot, object string) (capture.Result, error) {
	mem := snap.MemoryPath()
	if err := pagecache.Evict(mem); err != nil {
		return capture.Result{}, err
	}
	capt, err := capture.Start(object, mem)
	if err != nil {
		return capture.Result{}, err
	}
	vm, err := h.Restore(ctx, snap, localOnly(func(_ context.Context, snap Snapshot, env Env) (Session, error) {
		return beginVanilla(snap, env, "")
	}))
	if err != nil {
		capt.Close()
		return capture.Result{}, err
	}
	err = vm.Invoke(ctx)
	res, serr := capt.Stop()
	vm.Close()
	if err == nil {
		err = serr
	}
	if err != nil {
		return capture.Result{}, err
	}
	if res.Seen == 0 {
		return capture.Result{}, fmt.Errorf("the capture saw no page-cache insertion of %s during the record invocation "+
			"(does its file system report %s:%s?)", mem, capture.TracepointGroup, capture.TracepointName)
	}
	return res, nil
}
