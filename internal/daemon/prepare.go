package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// PrepareRequest prepares a function for fast cold starts.
type PrepareRequest struct {
	Function    string
	RecordEvent json.RawMessage // the record input
	GroupSize   int             // FaaSnap working-set group size in pages (default 1024)
	MergeGap    int             // FaaSnap region merge threshold in pages (default 32)
	Timeout     time.Duration   // per record invocation
}

// PrepareResult describes what prepare built.
type PrepareResult struct {
	Function string            `json:"function"`
	Clean    *catalog.Snapshot `json:"clean_snapshot"`
	Warm     *catalog.Snapshot `json:"warm_snapshot"`
	FaaSnap  *FaaSnapBuild     `json:"faasnap"`
	REAP     *REAPBuild        `json:"reap"`
	SnapBPF  *SnapBPFBuild     `json:"snapbpf,omitempty"`
	// SnapBPFUnavailable says why this host cannot capture for snapbpf
	// (no tracefs, BTF, capabilities or capture program); everything else
	// is prepared, and snapbpf restores of the snapshot run as vanilla.
	SnapBPFUnavailable string        `json:"snapbpf_unavailable,omitempty"`
	Timing             PrepareTiming `json:"timing"`
}

// FaaSnapBuild summarizes the FaaSnap record phase and artifacts.
type FaaSnapBuild struct {
	Scans           int                       `json:"scans"`
	WorkingSetPages int                       `json:"working_set_pages"`
	Stats           memlayout.LoadingSetStats `json:"stats"`
	LoadingSetBytes int64                     `json:"loading_set_bytes"`
	GroupSize       int                       `json:"group_size"`
	MergeGap        int                       `json:"merge_gap"`
	FreedPages      FreePageReporting         `json:"free_page_reporting"`
}

// FreePageReporting measures how many working-set pages the guest had freed:
// the guest's virtio-balloon free page reporting tells QEMU, which punches
// them out of the record VM's memory file, so they become zero pages and
// leave the loading set (FaaSnap §4.5 zeroed freed pages with a patched
// guest kernel instead).
type FreePageReporting struct {
	WaitMS float64 `json:"wait_ms"` // time waited for reporting to settle
	// Working-set pages that were non-zero right after the record
	// invocation, and after the wait.
	NonzeroBefore int `json:"nonzero_before"`
	NonzeroAfter  int `json:"nonzero_after"`
	// PagesRemoved: working-set pages non-zero before the wait and zero
	// after it (freed and reported). WrittenDuringWait: the other way
	// round (the guest kept running while reporting settled).
	PagesRemoved      int `json:"pages_removed"`
	WrittenDuringWait int `json:"written_during_wait"`
}

// REAPBuild summarizes the REAP record phase and artifacts.
type REAPBuild struct {
	FaultedPages    int   `json:"faulted_pages"`
	WorkingSetBytes int64 `json:"working_set_bytes"`
}

// PrepareTiming says where prepare's time went, in milliseconds.
type PrepareTiming struct {
	BootMS          float64 `json:"boot_ms"`
	CleanSnapshotMS float64 `json:"clean_snapshot_ms"`
	FaaSnapRecordMS float64 `json:"faasnap_record_ms"`
	WarmSnapshotMS  float64 `json:"warm_snapshot_ms"`
	FaaSnapBuildMS  float64 `json:"faasnap_build_ms"`
	REAPRecordMS    float64 `json:"reap_record_ms"`
	REAPBuildMS     float64 `json:"reap_build_ms"`
	SnapBPFRecordMS float64 `json:"snapbpf_record_ms"`
	SnapBPFBuildMS  float64 `json:"snapbpf_build_ms"`
	TotalMS         float64 `json:"total_ms"`
}

// Prepare runs FaaSnap's flow (section 4.8, Figure 5) for a function: boot
// a VM and take a clean snapshot; restore it while recording the working set
// (host page recording with mincore) during one invocation with the record
// input; take the warm snapshot; build FaaSnap's artifacts from the
// recording and the warm memory file; then restore the warm snapshot with
// every fault served through userfaultfd during one more invocation with the
// record input (REAP's record phase) and build REAP's working-set file;
// finally restore it once more as vanilla while an eBPF program captures
// the page-cache insertions of its memory file (SnapBPF's capture) and
// write SnapBPF's prefetch plan. Every later cold invocation restores the warm snapshot.
func (s *Service) Prepare(ctx context.Context, req PrepareRequest) (*PrepareResult, error) {
	t0 := time.Now()
	if req.GroupSize == 0 {
		req.GroupSize = 1024
	}
	if req.MergeGap == 0 {
		req.MergeGap = 32
	}
	if req.GroupSize < 1 || req.GroupSize > 1<<20 || req.MergeGap < 0 || req.MergeGap > 1<<20 {
		return nil, fmt.Errorf("%w: group_size must be 1..1048576 and merge_gap 0..1048576", ErrInvalid)
	}
	if err := checkEvent(req.RecordEvent); err != nil {
		return nil, err
	}
	timeout, err := s.timeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	if _, err := s.GetFunction(ctx, req.Function); err != nil {
		return nil, err
	}
	res := &PrepareResult{Function: req.Function}
	// Checked before anything boots so the result says at once why a host
	// cannot capture; the other strategies are prepared regardless.
	if err := s.checkSnapBPF(); err != nil {
		res.SnapBPFUnavailable = err.Error()
		s.log.Warn("snapbpf capture unavailable; preparing the other strategies", "function", req.Function, "err", err)
	}

	// 1. Boot and clean snapshot.
	vm, err := s.BootVM(ctx, req.Function)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	t := time.Now()
	res.Clean, err = s.CreateSnapshot(ctx, vm.ID)
	_ = s.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if err != nil {
		return nil, err
	}
	res.Timing.CleanSnapshotMS = ms(time.Since(t))

	// 2. FaaSnap record phase, producing the warm snapshot.
	t = time.Now()
	var rec restore.Session
	lv, vmRec, _, err := s.restore(ctx, res.Clean.ID, restoreOpts{kind: restore.FaaSnap, start: t,
		begin: func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
			var err error
			rec, err = restore.BeginFaaSnapRecord(ctx, snap, env, req.GroupSize)
			return rec, err
		}})
	if err != nil {
		return nil, fmt.Errorf("faasnap record: %w", err)
	}
	warm, order, freed, recErr := s.recordAndSnapshot(ctx, lv, req.RecordEvent, timeout, rec)
	lv.mu.Unlock()
	_ = s.DeleteVM(context.WithoutCancel(ctx), vmRec.ID)
	if recErr != nil {
		return nil, fmt.Errorf("faasnap record: %w", recErr)
	}
	res.Warm = warm
	res.Timing.FaaSnapRecordMS = ms(time.Since(t)) - warm.CreateMS
	res.Timing.WarmSnapshotMS = warm.CreateMS
	if err := s.db.SetSnapshotParent(ctx, warm.ID, res.Clean.ID); err != nil {
		return nil, err
	}
	warm.Parent = res.Clean.ID

	// 3. FaaSnap artifacts from the recording and the warm memory file.
	t = time.Now()
	m, err := snapshot.ReadManifest(warm.Dir)
	if err != nil {
		return nil, err
	}
	wsnap := restore.Snapshot{Dir: warm.Dir, Manifest: m}
	memPath, memSHA := wsnap.MemoryPath(), m.Files[snapshot.MemoryFile].SHA256
	fdir := wsnap.ArtifactDir(restore.FaaSnap)
	art, err := memlayout.WriteFaaSnap(fdir, memPath, memSHA, order,
		memlayout.FaaSnapOptions{GroupSize: req.GroupSize, MergeGap: req.MergeGap})
	if err != nil {
		return nil, fmt.Errorf("build faasnap artifacts: %w", err)
	}
	if err := art.Verify(m.Files[snapshot.MemoryFile].Size, memSHA, true); err != nil {
		return nil, fmt.Errorf("verify faasnap artifacts: %w", err)
	}
	_ = restore.TrustArtifact(filepath.Join(fdir, restore.FaaSnapLoadingSet))
	res.FaaSnap = &FaaSnapBuild{WorkingSetPages: len(order), Stats: art.Stats, GroupSize: req.GroupSize,
		MergeGap: req.MergeGap, Scans: rec.(interface{ Scans() int }).Scans(), FreedPages: freed}
	if st, err := os.Stat(filepath.Join(fdir, restore.FaaSnapLoadingSet)); err == nil {
		res.FaaSnap.LoadingSetBytes = st.Size()
	}
	res.Timing.FaaSnapBuildMS = ms(time.Since(t))

	// 4. REAP record phase on the warm snapshot, and its working-set file.
	t = time.Now()
	var rrec restore.Session
	lv, vmRec, _, err = s.restore(ctx, warm.ID, restoreOpts{kind: restore.REAP, start: t,
		begin: func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
			var err error
			rrec, err = restore.BeginREAPRecord(ctx, snap, env)
			return rrec, err
		}})
	if err != nil {
		return nil, fmt.Errorf("reap record: %w", err)
	}
	inv := &Invocation{ID: newID("inv-"), Function: req.Function, VM: vmRec.ID, Mode: "record"}
	err = s.invokeLocked(ctx, lv, inv, req.RecordEvent, timeout)
	var faulted []uint64
	if err == nil {
		faulted = rrec.(restore.RecordedPages).RecordedPages()
	}
	lv.mu.Unlock()
	_ = s.DeleteVM(context.WithoutCancel(ctx), vmRec.ID)
	if err != nil {
		return nil, fmt.Errorf("reap record: %w", err)
	}
	if !inv.OK {
		return nil, fmt.Errorf("%w: reap record invocation raised %s: %s", ErrInvalid, inv.Error.Type, inv.Error.Message)
	}
	res.Timing.REAPRecordMS = ms(time.Since(t))
	t = time.Now()
	rdir := wsnap.ArtifactDir(restore.REAP)
	rart, err := memlayout.WriteREAP(rdir, memPath, memSHA, faulted)
	if err != nil {
		return nil, fmt.Errorf("build reap artifacts: %w", err)
	}
	if err := rart.Verify(m.Files[snapshot.MemoryFile].Size, memSHA, true); err != nil {
		return nil, fmt.Errorf("verify reap artifacts: %w", err)
	}
	_ = restore.TrustArtifact(filepath.Join(rdir, restore.REAPWorkingSetFile))
	res.REAP = &REAPBuild{FaultedPages: len(faulted)}
	if st, err := os.Stat(filepath.Join(rdir, restore.REAPWorkingSetFile)); err == nil {
		res.REAP.WorkingSetBytes = st.Size()
	}
	res.Timing.REAPBuildMS = ms(time.Since(t))

	// 5. SnapBPF capture on the warm snapshot, and its prefetch plan.
	if res.SnapBPFUnavailable == "" {
		res.SnapBPF, res.Timing.SnapBPFRecordMS, res.Timing.SnapBPFBuildMS, err =
			s.prepareSnapBPF(ctx, req.Function, warm, wsnap, req.RecordEvent, timeout, faulted)
		if err != nil {
			return nil, fmt.Errorf("snapbpf capture: %w", err)
		}
	}
	res.Timing.TotalMS = ms(time.Since(t0))
	b, _ := json.Marshal(res)
	if err := s.db.SetSnapshotPrepared(ctx, warm.ID, string(b)); err != nil {
		return nil, err
	}
	s.log.Info("prepared", "function", req.Function, "warm", warm.ID, "working_set_pages", len(order),
		"loading_set_bytes", res.FaaSnap.LoadingSetBytes, "reap_pages", len(faulted),
		"snapbpf", res.SnapBPF != nil, "total_ms", res.Timing.TotalMS)
	return res, nil
}

// recordAndSnapshot runs the record invocation on a locked record VM, ends
// the recording and takes the warm snapshot of its (shared) memory.
func (s *Service) recordAndSnapshot(ctx context.Context, lv *liveVM, event json.RawMessage, timeout time.Duration, rec restore.Session) (*catalog.Snapshot, []uint64, FreePageReporting, error) {
	var freed FreePageReporting
	inv := &Invocation{ID: newID("inv-"), Function: lv.fn.Name, VM: lv.id, Mode: "record"}
	if err := s.invokeLocked(ctx, lv, inv, event, timeout); err != nil {
		return nil, nil, freed, err
	}
	if !inv.OK {
		return nil, nil, freed, fmt.Errorf("%w: record invocation raised %s: %s", ErrInvalid, inv.Error.Type, inv.Error.Message)
	}
	order := rec.(restore.RecordedPages).RecordedPages()
	before, err := nonzeroPages(lv.memPath, order)
	if err != nil {
		return nil, nil, freed, err
	}
	t := time.Now()
	waitForReporting(ctx, lv.memPath)
	freed.WaitMS = ms(time.Since(t))
	after, err := nonzeroPages(lv.memPath, order)
	if err != nil {
		return nil, nil, freed, err
	}
	for i := range order {
		freed.NonzeroBefore += b2i(before[i])
		freed.NonzeroAfter += b2i(after[i])
		freed.PagesRemoved += b2i(before[i] && !after[i])
		freed.WrittenDuringWait += b2i(!before[i] && after[i])
	}
	warm, err := s.snapshotLocked(ctx, lv)
	if err != nil {
		return nil, nil, freed, err
	}
	return warm, order, freed, nil
}

// Free page reporting reports a batch about two seconds after pages are
// freed (PAGE_REPORTING_DELAY); wait until the memory file's allocation has
// not changed for longer than that, or give up after reportingMaxWait.
const (
	reportingQuiet   = 2500 * time.Millisecond
	reportingMaxWait = 8 * time.Second
)

func waitForReporting(ctx context.Context, memPath string) {
	start := time.Now()
	last, lastChange := allocated(memPath), time.Now()
	for time.Since(lastChange) < reportingQuiet && time.Since(start) < reportingMaxWait {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		if a := allocated(memPath); a != last {
			last, lastChange = a, time.Now()
		}
	}
}

func allocated(path string) int64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return -1
	}
	return st.Blocks
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// nonzeroPages says, for each of pages, whether it is not all zero in path.
func nonzeroPages(path string, pages []uint64) ([]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, snapshot.PageSize)
	zero := make([]byte, snapshot.PageSize)
	out := make([]bool, len(pages))
	for i, p := range pages {
		k, err := f.ReadAt(buf, int64(p)*snapshot.PageSize)
		if k == 0 && err != nil {
			continue // beyond the end: zero
		}
		out[i] = !bytes.Equal(buf[:k], zero[:k])
	}
	return out, nil
}
