package wire

// What the restore strategies report: per restore (StrategyStats, one part
// a strategy) and per prepare (PrepareResult, one build a strategy that
// records).

// StrategyStats are a restore's strategy-specific measurements: the fields
// every strategy may set, and one part a strategy (zero for the others).
// On the wire they are one flat object whose zero fields are left out.
type StrategyStats struct {
	// Fallback explains why a requested strategy ran as vanilla.
	Fallback string `json:"fallback,omitempty"`
	// LayoutEntries: mappings the interposer made (layout strategies).
	LayoutEntries int `json:"layout_entries,omitempty"`
	// RecordedPageCount: pages recorded (record sessions of prepare).
	RecordedPageCount uint64 `json:"recorded_pages,omitempty"`

	CachedStats
	LazyStats
	REAPStats
	FaaSnapStats
	PremapStats
	SnapBPFStats
	SetUseStats
}

// SetUseStats: how the guest used the set the strategy recorded (REAP's
// working set, FaaSnap's loading set, SnapBPF's prefetch set), measured
// after the invocation answered; absent for strategies without one.
type SetUseStats struct {
	SetPages        uint64 `json:"set_pages,omitempty"`         // pages the set holds
	SetTouchedPages uint64 `json:"set_touched_pages,omitempty"` // of those, touched by the guest
	// SetOutsidePages: non-zero pages the guest touched that the set did
	// not hold (served on demand).
	SetOutsidePages uint64 `json:"set_outside_pages,omitempty"`
	SetUnusedPages  uint64 `json:"set_unused_pages,omitempty"` // set pages never touched
	// SetOutsideRatio is SetOutsidePages over all pages touched.
	SetOutsideRatio float64 `json:"set_outside_ratio,omitempty"`
}

// CachedStats: the page-cache fill, reported apart from set-up.
type CachedStats struct {
	CacheFillMS float64 `json:"cache_fill_ms,omitempty"`
}

// LazyStats: guest memory served from a memory source (the snapshot's
// memory file is not on this host; vanilla, reap and faasnap).
type LazyStats struct {
	Lazy                bool    `json:"lazy,omitempty"`                  // memory came from a source, not a local file
	SourceFaults        uint64  `json:"source_faults,omitempty"`         // faults served by reading the source
	SourceBytes         uint64  `json:"source_bytes,omitempty"`          // bytes those reads returned
	SourceReadMS        float64 `json:"source_read_ms,omitempty"`        // time spent in them
	SourceFetchedBytes  uint64  `json:"source_fetched_bytes,omitempty"`  // bytes the source fetched from its store meanwhile
	SourceFetchedChunks uint64  `json:"source_fetched_chunks,omitempty"` // chunks it fetched
	SourceCacheHits     uint64  `json:"source_cache_hits,omitempty"`     // reads it answered from its cache
	SourceFetchMS       float64 `json:"source_fetch_ms,omitempty"`       // time its fetches took, summed (parallel ones overlap)
	ParkedFaults        uint64  `json:"parked_faults,omitempty"`         // faults that waited for a fetch off the fault loop
	ParkedMS            float64 `json:"parked_ms,omitempty"`             // time those faults waited, summed
	LoadingSetFaults    uint64  `json:"loading_set_faults,omitempty"`    // faasnap: faults served from the local loading-set file
	ZeroFaults          uint64  `json:"zero_faults,omitempty"`           // faasnap: faults on pages known to be zero, not read
	LoaderPages         uint64  `json:"loader_pages,omitempty"`          // faasnap: loading-set pages the loader installed
	LoaderExisting      uint64  `json:"loader_existing,omitempty"`       // faasnap: loading-set pages faulted in before the loader got there
	// A lazy snapshot's loading set is remote too (streamed): what it
	// fetched from the registry during the restore.
	LoadingSetFetchedBytes  uint64 `json:"loading_set_fetched_bytes,omitempty"`
	LoadingSetFetchedChunks uint64 `json:"loading_set_fetched_chunks,omitempty"`
}

// REAPStats: the working-set install and the faults served after it.
type REAPStats struct {
	PrefetchPages    uint64  `json:"prefetch_pages,omitempty"`     // installed before the vCPU ran
	PrefetchBytes    uint64  `json:"prefetch_bytes,omitempty"`     // working-set file read
	PrefetchMS       float64 `json:"prefetch_ms,omitempty"`        // read + install
	FaultsServed     uint64  `json:"faults_served,omitempty"`      // outside the working set
	FaultBytesRead   uint64  `json:"fault_bytes_read,omitempty"`   // memory file reads for them
	PrefetchDirectIO bool    `json:"prefetch_direct_io,omitempty"` // O_DIRECT was used
}

// FaaSnapStats: the loader of one restore.
type FaaSnapStats struct {
	LoaderBytes        uint64  `json:"loader_bytes,omitempty"`          // loading-set bytes read by the loader
	LoaderMS           float64 `json:"loader_ms,omitempty"`             // loader start to end
	LoaderShared       bool    `json:"loader_shared,omitempty"`         // joined a loader already running (burst)
	LoaderBeforeInvoke *bool   `json:"loader_finished_first,omitempty"` // loader done before the invocation answered
	// Variant is the FaaSnap variant restored (techniques switched off,
	// docs/bench/ablation.md); empty for all of FaaSnap.
	Variant string `json:"variant,omitempty"`
}

// PremapStats: the store copy mapped and the pre-fault pass.
type PremapStats struct {
	StoreBytes     uint64  `json:"store_bytes,omitempty"`     // the store copy mapped (shared by every clone)
	PopulatedBytes uint64  `json:"populated_bytes,omitempty"` // guest memory pre-faulted before the vCPU ran
	PopulateMS     float64 `json:"populate_ms,omitempty"`     // time to pre-fault it (part of set-up)
	// On device-DAX: the VM's own range of the device (a copy's size) and
	// the time to fill it from the stored copy (part of set-up).
	DeviceBytes uint64  `json:"device_bytes,omitempty"`
	CloneCopyMS float64 `json:"clone_copy_ms,omitempty"`
}

// SnapBPFStats: the prefetch of one restore.
type SnapBPFStats struct {
	SnapBPFRanges         int     `json:"snapbpf_ranges,omitempty"`          // prefetch ranges (capture order)
	SnapBPFPages          uint64  `json:"snapbpf_pages,omitempty"`           // pages they hold
	SnapBPFReadaheadCalls int     `json:"snapbpf_readahead_calls,omitempty"` // readahead(2) calls, re-issues included
	SnapBPFIssueMS        float64 `json:"snapbpf_issue_ms,omitempty"`        // first pass of readahead calls
	SnapBPFResidentPages  uint64  `json:"snapbpf_resident_pages,omitempty"`  // of SnapBPFPages, resident at the last mincore check
	SnapBPFResidentMS     float64 `json:"snapbpf_resident_ms,omitempty"`     // until mincore saw every page resident
	SnapBPFFinishedFirst  *bool   `json:"snapbpf_finished_first,omitempty"`  // all resident before the invocation answered
	SnapBPFError          string  `json:"snapbpf_error,omitempty"`           // the prefetch failed (the guest still runs, as vanilla)
}

// PrepareResult describes what prepare built.
type PrepareResult struct {
	Function string        `json:"function"`
	Clean    *Snapshot     `json:"clean_snapshot"`
	Warm     *Snapshot     `json:"warm_snapshot"`
	FaaSnap  *FaaSnapBuild `json:"faasnap"`
	REAP     *REAPBuild    `json:"reap"`
	SnapBPF  *SnapBPFBuild `json:"snapbpf,omitempty"`
	// SnapBPFUnavailable says why this host cannot capture for snapbpf
	// (no tracefs, BTF, capabilities or capture program); everything else
	// is prepared, and snapbpf restores of the snapshot run as vanilla.
	SnapBPFUnavailable string        `json:"snapbpf_unavailable,omitempty"`
	Timing             PrepareTiming `json:"timing"`
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

// FaaSnapBuild summarizes the FaaSnap record phase and artifacts.
type FaaSnapBuild struct {
	Scans           int               `json:"scans"`
	WorkingSetPages int               `json:"working_set_pages"`
	Stats           LoadingSetStats   `json:"stats"`
	LoadingSetBytes int64             `json:"loading_set_bytes"`
	GroupSize       int               `json:"group_size"`
	MergeGap        int               `json:"merge_gap"`
	FreedPages      FreePageReporting `json:"free_page_reporting"`
	// WarmPagesAdded are pages the guest touched restoring the warm
	// snapshot (REAP's recording) that the recording on the clean one had
	// not seen, appended to the working set as its last groups.
	WarmPagesAdded int `json:"warm_pages_added,omitempty"`
	// Variants are the artifacts built with one technique off, when the
	// prepare asked for them (faasnap_variants).
	Variants []FaaSnapVariantBuild `json:"variants,omitempty"`
}

// FaaSnap's variants (InvokeRequest.Variant): techniques switched off.
const (
	VariantConcurrent   = "concurrent"    // concurrent paging alone (Figure 9)
	VariantNoLoadingSet = "no-loadingset" // per-region mapping, no loading-set file (Figure 9)
	VariantNoHostRec    = "no-hostrec"    // working set from the guest's faults
	VariantNoFreed      = "no-freed"      // freed pages kept in the loading set
	VariantNoMerge      = "no-merge"      // regions not merged
)

// FaaSnapVariantBuild is one artifact built with a technique off.
type FaaSnapVariantBuild struct {
	Variant         string          `json:"variant"`
	WorkingSetPages int             `json:"working_set_pages"`
	Stats           LoadingSetStats `json:"stats"`
	LoadingSetBytes int64           `json:"loading_set_bytes"`
}

// LoadingSetStats describes how a working set became a loading set.
type LoadingSetStats struct {
	// WorkingSetPages is the number of distinct pages in the working set.
	WorkingSetPages uint64 `json:"working_set_pages"`
	// LoadingSetPages are the working-set pages that are non-zero (the
	// paper's loading set, before merging).
	LoadingSetPages uint64 `json:"loading_set_pages"`
	// ZeroPagesInWorkingSet are the working-set pages that are zero (the
	// paper's released set); WorkingSetPages = LoadingSetPages + this.
	ZeroPagesInWorkingSet uint64 `json:"zero_pages_in_working_set"`
	// GapPages are the pages merging added (zero or non-working-set pages
	// between merged runs); the loading-set file holds LoadingSetPages +
	// GapPages pages.
	GapPages uint64 `json:"gap_pages"`
	// RegionsBeforeMerge is the number of maximal runs of consecutive
	// loading-set pages; RegionsAfterMerge the number of merged regions.
	RegionsBeforeMerge uint64 `json:"regions_before_merge"`
	RegionsAfterMerge  uint64 `json:"regions_after_merge"`
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

// REAPBuild summarizes the REAP record phase and artifacts.
type REAPBuild struct {
	FaultedPages    int   `json:"faulted_pages"`
	WorkingSetBytes int64 `json:"working_set_bytes"`
}

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
	// FreePagesFiltered: captured pages in holes of the warm memory file;
	// not prefetched.
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
