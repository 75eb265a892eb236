package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapbpf"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// SnapBPFBuild summarizes the SnapBPF capture on the warm snapshot and the
// prefetch plan written from it.
type SnapBPFBuild struct {
	// Events are the page-cache insertions (folios) of the warm memory
	// file the eBPF program saw during the record invocation; Dropped
	// those that did not fit in its buffer.
	Events  uint64 `json:"events"`
	Dropped uint64 `json:"dropped"`
	// CapturedPages: distinct pages of the memory file those insertions
	// held, host readahead included.
	CapturedPages uint64 `json:"captured_pages"`
	// FreePagesFiltered: captured pages in holes of the warm memory file
	// (freed by the guest and punched by free page reporting, or never
	// written); not prefetched.
	FreePagesFiltered uint64 `json:"free_pages_filtered"`
	// PrefetchPages and Ranges: what a snapbpf restore reads ahead.
	PrefetchPages uint64 `json:"prefetch_pages"`
	Ranges        int    `json:"ranges"`
	// REAPOverlapPages: prefetch pages that are also in REAP's recorded
	// working set (pages the guest really touched).
	REAPOverlapPages uint64 `json:"reap_overlap_pages"`
	// CaptureMS: program attached to detached (restore, record invocation).
	CaptureMS float64 `json:"capture_ms"`
}

// checkSnapBPF says, before anything is booted, whether this host can
// capture for snapbpf, naming everything that is missing.
func (s *Service) checkSnapBPF() error {
	if err := snapbpf.Check(s.cfg.SnapBPFObject); err != nil {
		return fmt.Errorf("snapbpf capture unavailable: %w", err)
	}
	return nil
}

// prepareSnapBPF is SnapBPF's capture on the warm snapshot (HotStorage'25,
// "eBPF capture and prefetch"): the warm memory file is evicted from the
// page cache, the capture program is attached for that file's inode, the
// warm snapshot is restored exactly as vanilla restores it (memory file
// mapped private, host readahead as configured) and runs the record
// invocation; every folio that entered the page cache meanwhile is
// recorded in order. The plan (free pages filtered, runs coalesced) goes to
// strategies/snapbpf/snapbpf.json.
//
// The capture deliberately keeps the kernel's readahead: it records what a
// vanilla cold start of this snapshot brings into the page cache, which is
// what SnapBPF's capture at the page-cache insertion point sees. See
// docs/design.md (snapbpf) for why thaw does not record with MADV_RANDOM.
func (s *Service) prepareSnapBPF(ctx context.Context, fn string, warm *catalog.Snapshot, wsnap restore.Snapshot,
	event json.RawMessage, timeout time.Duration, reapPages []uint64) (*SnapBPFBuild, float64, float64, error) {
	t := time.Now()
	memPath := wsnap.MemoryPath()
	if err := pagecache.Evict(memPath); err != nil {
		return nil, 0, 0, err
	}
	capt, err := snapbpf.Start(s.cfg.SnapBPFObject, memPath)
	if err != nil {
		return nil, 0, 0, err
	}
	lv, vmRec, _, err := s.restore(ctx, warm.ID, restoreOpts{kind: restore.Vanilla, start: t})
	if err != nil {
		capt.Close()
		return nil, 0, 0, err
	}
	inv := &Invocation{ID: newID("inv-"), Function: fn, VM: vmRec.ID, Mode: "record"}
	err = s.invokeLocked(ctx, lv, inv, event, timeout)
	res, serr := capt.Stop()
	lv.mu.Unlock()
	_ = s.DeleteVM(context.WithoutCancel(ctx), vmRec.ID)
	if err != nil {
		return nil, 0, 0, err
	}
	if serr != nil {
		return nil, 0, 0, serr
	}
	if !inv.OK {
		return nil, 0, 0, fmt.Errorf("%w: snapbpf record invocation raised %s: %s", ErrInvalid, inv.Error.Type, inv.Error.Message)
	}
	if res.Seen == 0 {
		return nil, 0, 0, fmt.Errorf("the capture saw no page-cache insertion of %s during the record invocation "+
			"(does its file system report %s:%s?)", memPath, snapbpf.TracepointGroup, snapbpf.TracepointName)
	}
	recordMS := ms(time.Since(t))
	t = time.Now()
	m := wsnap.Manifest.Files[snapshot.MemoryFile]
	art, err := memlayout.WriteSnapBPF(wsnap.ArtifactDir(restore.SnapBPF), memPath, m.SHA256, res.Pages(),
		uint64(len(res.Events)), res.Dropped)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("build snapbpf artifact: %w", err)
	}
	b := &SnapBPFBuild{Events: res.Seen, Dropped: res.Dropped, CapturedPages: art.Capture.Pages,
		FreePagesFiltered: art.Capture.FreePages, PrefetchPages: art.PrefetchPages(), Ranges: len(art.Ranges),
		CaptureMS: ms(res.Elapsed)}
	inWS := make(map[uint64]bool, len(reapPages))
	for _, p := range reapPages {
		inWS[p] = true
	}
	for _, r := range art.Ranges {
		for p := r.Start; p < r.End(); p++ {
			if inWS[p] {
				b.REAPOverlapPages++
			}
		}
	}
	return b, recordMS, ms(time.Since(t)), nil
}
