package restore

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// faasnapRecord records the working set of the record invocation with
// mincore over the record VM's memory file, each time QEMU's RSS grew by a
// group. The record VM maps a sparse copy of the clean memory shared (QEMU
// cannot dump a private mapping), so after the invocation it is the warm
// memory (docs/design.md, prepare).
type faasnapRecord struct {
	sessionBase
	memPath   string
	groupSize int

	mu       sync.Mutex
	recorder *memlayout.Recorder
	mapping  []byte
	vec      []byte
	scans    int
	stop     chan struct{}
	stopped  chan struct{}
	pid      int
}

// beginFaaSnapRecord prepares a record restore of snap: the sparse copy of
// its memory goes to the VM's run directory.
func beginFaaSnapRecord(snap Snapshot, env Env, groupSize int) (*faasnapRecord, error) {
	mem := filepath.Join(env.RunDir, "memory")
	if _, err := snapshot.CopySparse(mem, snap.MemoryPath()); err != nil {
		return nil, fmt.Errorf("record: copy memory: %w", err)
	}
	if err := pagecache.EvictAll(mem, snap.MemoryPath()); err != nil {
		return nil, err
	}
	return &faasnapRecord{sessionBase: base(env), memPath: mem, groupSize: groupSize, recorder: &memlayout.Recorder{},
		stop: make(chan struct{}), stopped: make(chan struct{})}, nil
}

func (r *faasnapRecord) Kind() Kind { return FaaSnap }

// Memory is the shared copy: guest writes land in it, and QEMU's punches
// of pages the guest reported free reach it (it is this VM's own copy), so
// freed pages are holes in the warm memory (§4.5's freed-page filtering).
// Readahead is held off on it: each fault brings in its own page only, so
// the recording is what the guest touched, not what the host's readahead
// happened to bring around it (steady recordings, docs/design.md).
func (r *faasnapRecord) Memory() vmm.Memory {
	m := r.protected(vmm.Memory{Path: r.memPath, Shared: true})
	m.File.PunchFreed = true
	m.File.NoReadahead = true
	return m
}

// Started maps the memory file in the daemon and starts polling.
func (r *faasnapRecord) Started(_ context.Context, pid int) error {
	f, err := os.Open(r.memPath)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("record: map memory: %w", err)
	}
	r.mu.Lock()
	r.mapping, r.vec = m, make([]byte, (len(m)+4095)/4096)
	r.mu.Unlock()
	r.scan() // what QEMU itself touched while starting
	r.pid = pid
	go r.poll()
	return nil
}

// poll scans whenever the VMM's resident set grew by a group (the paper
// polls procfs for the RSS for the same reason: mincore over hundreds of
// MiB is not free, and a group is the unit of ordering anyway).
func (r *faasnapRecord) poll() {
	defer close(r.stopped)
	last := rssPages(r.pid)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		if rss := rssPages(r.pid); rss >= last+uint64(r.groupSize) {
			r.scan()
			last = rss
		}
	}
}

func rssPages(pid int) uint64 {
	c, err := procstat.Read(pid)
	if err != nil {
		return 0
	}
	return (c.RssFileKiB + c.RssShmemKiB + c.RssAnonKiB) / 4
}

func (r *faasnapRecord) scan() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mapping == nil {
		return
	}
	if err := pagecache.Mincore(r.mapping, r.vec); err != nil {
		return
	}
	r.recorder.Observe(r.vec)
	r.scans++
}

// InvocationDone takes the last scan and stops polling.
func (r *faasnapRecord) InvocationDone() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	if r.pid != 0 { // the poller runs only once Started succeeded
		<-r.stopped
		r.scan()
	}
}

// recordedPages is the working set in order of first appearance.
func (r *faasnapRecord) recordedPages() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorder.Pages()
}

// scanCount is how many mincore scans were taken.
func (r *faasnapRecord) scanCount() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scans
}

func (r *faasnapRecord) Stats() Stats {
	return Stats{RecordedPageCount: uint64(len(r.recordedPages()))}
}

func (r *faasnapRecord) Close() error {
	r.InvocationDone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mapping != nil {
		err := unix.Munmap(r.mapping)
		r.mapping = nil
		return err
	}
	return nil
}

// FaaSnapBuild summarizes the FaaSnap record phase and artifacts.
type FaaSnapBuild struct {
	Scans           int                  `json:"scans" unit:"count" desc:"mincore scans of the record VM"`
	WorkingSetPages int                  `json:"working_set_pages" unit:"pages" desc:"pages of the recorded working set"`
	Stats           wire.LoadingSetStats `json:"stats" desc:"how the working set became the loading set"`
	LoadingSetBytes int64                `json:"loading_set_bytes" unit:"bytes" desc:"the loading-set file"`
	GroupSize       int                  `json:"group_size" unit:"pages" desc:"working-set group size"`
	MergeGap        int                  `json:"merge_gap" unit:"pages" desc:"region merge threshold"`
	FreedPages      FreePageReporting    `json:"free_page_reporting" desc:"working-set pages the guest freed and reported"`
	// WarmPagesAdded are pages the guest touched restoring the warm
	// snapshot (REAP's recording) that the recording on the clean one had
	// not seen, appended to the working set as its last groups.
	WarmPagesAdded int `json:"warm_pages_added,omitempty" unit:"pages" desc:"pages the warm snapshot's restore touched, appended"`
	// Variants are the artifacts built with one technique off, when the
	// prepare asked for them (faasnap_variants).
	Variants []FaaSnapVariantBuild `json:"variants,omitempty" desc:"artifacts built with one technique off"`
}

// FaaSnapVariantBuild is one artifact built with a technique off.
type FaaSnapVariantBuild struct {
	Variant         string               `json:"variant"`
	WorkingSetPages int                  `json:"working_set_pages"`
	Stats           wire.LoadingSetStats `json:"stats"`
	LoadingSetBytes int64                `json:"loading_set_bytes"`
}

// FreePageReporting measures how many working-set pages the guest had
// freed: the guest's virtio-balloon free page reporting tells QEMU, which
// punches them out of the record VM's memory file, so they become zero
// pages and leave the loading set.
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

// recordFaaSnap is FaaSnap's prepare (section 4.8, Figure 5): restore the
// clean snapshot recording the working set during one record invocation,
// take the warm snapshot, and build the loading set from the recording and
// the warm memory file.
func recordFaaSnap(ctx context.Context, h RecordHost, p *Prepare) error {
	t := time.Now()
	var rec *faasnapRecord
	vm, err := h.Restore(ctx, p.Clean, localOnly(func(_ context.Context, snap Snapshot, env Env) (Session, error) {
		var err error
		rec, err = beginFaaSnapRecord(snap, env, p.Options.GroupSize)
		return rec, err
	}))
	if err != nil {
		return err
	}
	order, freed, freedPages, warm, snapMS, err := recordWarm(ctx, vm, rec)
	vm.Close()
	if err != nil {
		return err
	}
	p.Warm, p.Loading = warm, order
	p.Step(FaaSnap).RecordMS = msOf(time.Since(t)) - snapMS
	p.Result.Timing.WarmSnapshotMS = snapMS

	t = time.Now()
	opts := memlayout.FaaSnapOptions{GroupSize: p.Options.GroupSize, MergeGap: p.Options.MergeGap}
	art, lsBytes, err := buildFaaSnap(warm.ArtifactDir(FaaSnap), warm, order, opts)
	if err != nil {
		return err
	}
	b := &FaaSnapBuild{WorkingSetPages: len(order), Stats: art.Stats, GroupSize: p.Options.GroupSize,
		MergeGap: p.Options.MergeGap, Scans: rec.scanCount(), FreedPages: freed, LoadingSetBytes: lsBytes}
	p.SetBuild(FaaSnap, b)
	if p.Options.Variants {
		if freedPages, err = freedSinceClean(p.Clean, warm, order, freedPages); err != nil {
			return err
		}
		noFreed, noMerge := opts, opts
		noFreed.Freed, noMerge.MergeGap = freedPages, -1
		for _, v := range []struct {
			name string
			opts memlayout.FaaSnapOptions
		}{{VariantNoFreedFilter, noFreed}, {VariantNoMerge, noMerge}} {
			if err := buildFaaSnapVariant(p, v.name, order, v.opts); err != nil {
				return err
			}
		}
	}
	p.Step(FaaSnap).BuildMS = msOf(time.Since(t))
	return nil
}

// freedSinceClean adds to freed the working-set pages that are zero in the
// warm memory file but not in the clean one: pages the guest freed and free
// page reporting dropped during the record invocation (freed holds those
// dropped during the wait after it). Without FaaSnap's freed-page handling
// (the paper's guest sanitizes them to zero) they would keep stale data and
// be in the loading set.
func freedSinceClean(clean, warm Snapshot, order, freed []uint64) ([]uint64, error) {
	was, err := nonzeroPages(clean.MemoryPath(), order)
	if err != nil {
		return nil, err
	}
	is, err := nonzeroPages(warm.MemoryPath(), order)
	if err != nil {
		return nil, err
	}
	for i, p := range order {
		if was[i] && !is[i] {
			freed = append(freed, p)
		}
	}
	return freed, nil
}

// finishFaaSnap builds the variant without host page recording once REAP
// recorded the pages the guest itself faulted (in fault order), if the
// prepare asked for variants. thaw cannot see guest faults of the mincore
// record VM (a shared file mapping), so this working set comes from REAP's
// record invocation on the warm snapshot.
func finishFaaSnap(p *Prepare) error {
	if err := completeLoadingSet(p); err != nil {
		return err
	}
	if !p.Options.Variants || faasnapBuildOf(p) == nil {
		return nil
	}
	if p.Touched == nil {
		return fmt.Errorf("variant %s needs the guest's faulted pages (the reap strategy's recording)", VariantNoHostRecording)
	}
	t := time.Now()
	err := buildFaaSnapVariant(p, VariantNoHostRecording, p.Touched,
		memlayout.FaaSnapOptions{GroupSize: p.Options.GroupSize, MergeGap: p.Options.MergeGap})
	p.Step(FaaSnap).BuildMS += msOf(time.Since(t))
	return err
}

// completeLoadingSet appends to the loading set the pages the guest touched
// restoring the warm snapshot (REAP's recording of the record input on it)
// that the recording on the clean snapshot did not see, as its last groups,
// and builds the artifact again. With readahead held off during the
// recording, the loading set is what the guest touched; the restore of the
// warm snapshot, which every cold start takes, touches some pages the
// record invocation on the clean one did not (steady recordings,
// docs/design.md).
func completeLoadingSet(p *Prepare) error {
	b := faasnapBuildOf(p)
	if b == nil || p.Touched == nil || p.Loading == nil {
		return nil
	}
	seen := make(map[uint64]bool, len(p.Loading))
	for _, pg := range p.Loading {
		seen[pg] = true
	}
	order := append([]uint64(nil), p.Loading...)
	for _, pg := range p.Touched {
		if !seen[pg] {
			seen[pg] = true
			order = append(order, pg)
		}
	}
	if len(order) == len(p.Loading) {
		return nil
	}
	t := time.Now()
	opts := memlayout.FaaSnapOptions{GroupSize: p.Options.GroupSize, MergeGap: p.Options.MergeGap}
	art, lsBytes, err := buildFaaSnap(p.Warm.ArtifactDir(FaaSnap), p.Warm, order, opts)
	if err != nil {
		return err
	}
	b.WorkingSetPages, b.Stats, b.LoadingSetBytes = len(order), art.Stats, lsBytes
	b.WarmPagesAdded = len(order) - len(p.Loading)
	p.Step(FaaSnap).BuildMS += msOf(time.Since(t))
	return nil
}

// buildFaaSnapVariant builds variant's artifact and reports it.
func buildFaaSnapVariant(p *Prepare, variant string, order []uint64, opts memlayout.FaaSnapOptions) error {
	art, lsBytes, err := buildFaaSnap(faasnapArtifactDir(p.Warm, variant), p.Warm, order, opts)
	if err != nil {
		return fmt.Errorf("variant %s: %w", variant, err)
	}
	b := faasnapBuildOf(p)
	b.Variants = append(b.Variants, FaaSnapVariantBuild{Variant: variant,
		WorkingSetPages: len(order), Stats: art.Stats, LoadingSetBytes: lsBytes})
	return nil
}

// buildFaaSnap writes and verifies a FaaSnap artifact of warm in dir and
// returns it with its loading-set file's size.
func buildFaaSnap(dir string, warm Snapshot, order []uint64, opts memlayout.FaaSnapOptions) (*memlayout.FaaSnapArtifact, int64, error) {
	art, err := memlayout.WriteFaaSnap(dir, warm.MemoryPath(), memSHA(warm), order, opts)
	if err != nil {
		return nil, 0, fmt.Errorf("build artifacts: %w", err)
	}
	if err := art.Verify(memSize(warm), memSHA(warm), true); err != nil {
		return nil, 0, fmt.Errorf("verify artifacts: %w", err)
	}
	ls := filepath.Join(dir, FaaSnapLoadingSet)
	_ = snapshot.Trust(ls)
	st, err := os.Stat(ls)
	if err != nil {
		return nil, 0, err
	}
	return art, st.Size(), nil
}

// recordWarm runs the record invocation, ends the recording, waits for free
// page reporting to settle and takes the warm snapshot of the record VM's
// (shared) memory; freedPages are the working-set pages reporting zeroed,
// snapMS is the snapshot's own time.
func recordWarm(ctx context.Context, vm RecordVM, rec *faasnapRecord) (order []uint64, freed FreePageReporting, freedPages []uint64, warm Snapshot, snapMS float64, err error) {
	if err = vm.Invoke(ctx); err != nil {
		return
	}
	order = rec.recordedPages()
	before, err := nonzeroPages(rec.memPath, order)
	if err != nil {
		return
	}
	t := time.Now()
	waitForReporting(ctx, rec.memPath)
	freed.WaitMS = msOf(time.Since(t))
	after, err := nonzeroPages(rec.memPath, order)
	if err != nil {
		return
	}
	for i := range order {
		freed.NonzeroBefore += b2i(before[i])
		freed.NonzeroAfter += b2i(after[i])
		freed.PagesRemoved += b2i(before[i] && !after[i])
		if before[i] && !after[i] {
			freedPages = append(freedPages, order[i])
		}
		freed.WrittenDuringWait += b2i(!before[i] && after[i])
	}
	t = time.Now()
	warm, err = vm.Snapshot(ctx)
	snapMS = msOf(time.Since(t))
	return
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
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
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

// faasnapBuildOf is the FaaSnap build of p, nil before its Record.
func faasnapBuildOf(p *Prepare) *FaaSnapBuild {
	b, _ := p.Builds[FaaSnap].(*FaaSnapBuild)
	return b
}
