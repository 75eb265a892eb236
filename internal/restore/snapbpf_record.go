package restore

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	capture "github.com/thaw-dev/thaw/internal/snapbpf"
	"github.com/thaw-dev/thaw/wire"
)

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
		p.Result.SnapBPFUnavailable = fmt.Sprintf("snapbpf capture unavailable: %v", err)
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
	p.Result.Timing.SnapBPFRecordMS = msOf(time.Since(t))
	t = time.Now()
	art, err := memlayout.WriteSnapBPF(p.Warm.ArtifactDir(SnapBPF), mem, memSHA(p.Warm), res.Pages(),
		uint64(len(res.Events)), res.Dropped)
	if err != nil {
		return fmt.Errorf("build artifact: %w", err)
	}
	b := &wire.SnapBPFBuild{Events: res.Seen, Dropped: res.Dropped, CapturedPages: art.Capture.Pages,
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
	p.Result.SnapBPF = b
	p.Result.Timing.SnapBPFBuildMS = msOf(time.Since(t))
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
	vm, err := h.Restore(ctx, snap, shimmed(func(_ context.Context, snap Snapshot, env Env) (Session, error) {
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
