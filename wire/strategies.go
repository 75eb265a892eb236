package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// What the restore strategies report: per restore (StrategyStats: the
// fields every strategy may set and the part of the strategy that ran,
// keyed by its kind), per prepare (PrepareResult: one part per strategy
// that records, keyed by kind) and what each strategy is
// (StrategyDescription, in GET /v1/info). The parts' shapes are the
// strategies' own (internal/restore); the wire only keys them.

// StrategyStats are a restore's strategy-specific measurements: the fields
// every strategy may set, and the part of the strategy that ran. On the
// wire they are one object whose zero fields are left out, with the part
// under the key of its kind: {"kind": "reap", "fallback": ..., "reap": {...}}.
type StrategyStats struct {
	// Kind is the strategy that ran (vanilla after a fallback); Part is
	// under this key.
	Kind string `json:"kind,omitempty"`
	// Fallback explains why a requested strategy ran as vanilla.
	Fallback string `json:"fallback,omitempty"`
	// LayoutEntries: mappings the interposer made (layout strategies).
	LayoutEntries int `json:"layout_entries,omitempty"`
	// RecordedPageCount: pages recorded (record sessions of prepare).
	RecordedPageCount uint64 `json:"recorded_pages,omitempty"`
	// DaemonReadBytes: bytes the daemon itself read for the restore (a
	// working set, a loading set, faults it served), not QEMU.
	DaemonReadBytes uint64 `json:"daemon_read_bytes,omitempty"`
	// ServedFaults: guest page faults the daemon served (userfaultfd)
	// from local files; faults served from a memory source are
	// source_faults.
	ServedFaults uint64 `json:"served_faults,omitempty"`
	// FetchMS and FetchBytes: what the strategy spent bringing guest
	// memory in ahead of the guest's faults (a working set, a loading set,
	// a page-cache fill, a store copy's pre-faulting, a readahead).
	FetchMS    float64 `json:"fetch_ms,omitempty"`
	FetchBytes uint64  `json:"fetch_bytes,omitempty"`

	LazyStats
	SetUseStats

	// Part is the strategy's own measurements (a JSON object described by
	// its StrategyDescription.Stats); absent when it reports none.
	Part json.RawMessage `json:"-"`
}

// strategyStatsFields is StrategyStats without its methods (the common fields).
type strategyStatsFields StrategyStats

// MarshalJSON writes the common fields and the part under its kind.
func (s StrategyStats) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(strategyStatsFields(s))
	if err != nil || len(bytes.TrimSpace(s.Part)) == 0 {
		return b, err
	}
	if s.Kind == "" {
		return nil, fmt.Errorf("strategy stats: a part without a kind")
	}
	key, _ := json.Marshal(s.Kind)
	out := append([]byte(nil), b[:len(b)-1]...)
	if len(out) > 1 {
		out = append(out, ',')
	}
	out = append(append(append(out, key...), ':'), bytes.TrimSpace(s.Part)...)
	return append(out, '}'), nil
}

// UnmarshalJSON reads the common fields and the part under the kind.
func (s *StrategyStats) UnmarshalJSON(b []byte) error {
	var f strategyStatsFields
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*s = StrategyStats(f)
	if s.Kind == "" {
		return nil
	}
	var all map[string]json.RawMessage
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	s.Part = all[s.Kind]
	return nil
}

// PartAs decodes the part into v (a strategy's own stats type); false when
// the stats have no part of kind.
func (s StrategyStats) PartAs(kind string, v any) bool {
	if s.Kind != kind || len(s.Part) == 0 {
		return false
	}
	return json.Unmarshal(s.Part, v) == nil
}

// PartValues is the part as field name to value (numbers are float64),
// for printing it from its description; nil without one.
func (s StrategyStats) PartValues() map[string]any {
	var m map[string]any
	if len(s.Part) == 0 || json.Unmarshal(s.Part, &m) != nil {
		return nil
	}
	return m
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

// FaaSnap's variants (InvokeRequest.Variant): techniques switched off.
const (
	VariantConcurrent   = "concurrent"    // concurrent paging alone (Figure 9)
	VariantNoLoadingSet = "no-loadingset" // per-region mapping, no loading-set file (Figure 9)
	VariantNoHostRec    = "no-hostrec"    // working set from the guest's faults
	VariantNoFreed      = "no-freed"      // freed pages kept in the loading set
	VariantNoMerge      = "no-merge"      // regions not merged
)

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

// PrepareResult describes what prepare built.
type PrepareResult struct {
	Function string    `json:"function"`
	Clean    *Snapshot `json:"clean_snapshot"`
	Warm     *Snapshot `json:"warm_snapshot"`
	// Prepared is what each strategy that records did, keyed by its kind.
	Prepared map[string]*PreparedStrategy `json:"prepared"`
	Timing   PrepareTiming                `json:"timing"`
}

// PreparedStrategy is one strategy's step of a prepare.
type PreparedStrategy struct {
	RecordMS float64 `json:"record_ms"` // its record phase
	BuildMS  float64 `json:"build_ms"`  // building and verifying its artifacts
	// Unavailable says why this host cannot record for the strategy (its
	// artifacts are not built; its restores of the snapshot run as
	// vanilla); everything else is prepared.
	Unavailable string `json:"unavailable,omitempty"`
	// Build is the strategy's own summary of what it built (a JSON object
	// described by its StrategyDescription.Prepared); absent when
	// Unavailable.
	Build json.RawMessage `json:"build,omitempty"`
}

// PrepareTiming says where prepare's time went, in milliseconds; each
// strategy's steps are in its PreparedStrategy.
type PrepareTiming struct {
	BootMS          float64 `json:"boot_ms"`
	CleanSnapshotMS float64 `json:"clean_snapshot_ms"`
	WarmSnapshotMS  float64 `json:"warm_snapshot_ms"`
	TotalMS         float64 `json:"total_ms"`
}

// BuildAs decodes kind's build into v; false without one.
func (r *PrepareResult) BuildAs(kind string, v any) bool {
	if r == nil || r.Prepared[kind] == nil || len(r.Prepared[kind].Build) == 0 {
		return false
	}
	return json.Unmarshal(r.Prepared[kind].Build, v) == nil
}

// StrategyDescription is what a restore strategy is, as it describes
// itself (GET /v1/info).
type StrategyDescription struct {
	Kind string `json:"kind"`
	// Lazy: restores a snapshot whose memory is in the registry.
	Lazy bool `json:"lazy"`
	// Auto: the adaptive policy may choose it.
	Auto bool `json:"auto"`
	// Records: prepare records artifacts for it.
	Records bool `json:"records"`
	// UsesStore: it restores from the snapshot's copy in the memory store
	// (PUT /v1/snapshots/{id}/store first).
	UsesStore bool               `json:"uses_store"`
	Artifacts []StrategyArtifact `json:"artifacts"`
	// Stats are the fields of its part of a restore's strategy_stats.
	Stats []Measure `json:"stats"`
	// Prepared are the fields of its build in a prepare's result.
	Prepared []Measure `json:"prepared"`
}

// StrategyArtifact is one file of a strategy's artifact directory.
type StrategyArtifact struct {
	Name string `json:"name"`
	// Required: the strategy restores as itself only when it exists.
	Required bool `json:"required"`
	// Remote: a lazy pull leaves it in the registry (a placeholder on the
	// host) and a lazy restore reads it from there.
	Remote bool `json:"remote"`
	// Streamed: an import on invoke for the strategy fetches it at once.
	Streamed bool `json:"streamed"`
}

// Measure describes one field a strategy reports.
type Measure struct {
	Name        string `json:"name"`        // its JSON name in the strategy's part
	Unit        string `json:"unit"`        // ms, bytes, pages, count; "" for flags and text
	Description string `json:"description"` // what it measures
}

// UnmarshalJSON reads a prepare result, also one stored before results
// were keyed by kind (each strategy's build a member named by its kind,
// "<kind>_unavailable", and "<kind>_record_ms"/"<kind>_build_ms" in its
// timing): such a result reads as if it had been written keyed.
func (r *PrepareResult) UnmarshalJSON(b []byte) error {
	type plain PrepareResult
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*r = PrepareResult(p)
	if r.Prepared != nil {
		return nil
	}
	r.Prepared = map[string]*PreparedStrategy{}
	var top map[string]json.RawMessage
	var timing map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		return err
	}
	if t := top["timing"]; len(t) > 0 && json.Unmarshal(t, &timing) != nil {
		timing = nil
	}
	step := func(k string) *PreparedStrategy {
		if r.Prepared[k] == nil {
			r.Prepared[k] = &PreparedStrategy{}
		}
		return r.Prepared[k]
	}
	for key, v := range top {
		switch {
		case key == "function" || key == "clean_snapshot" || key == "warm_snapshot" || key == "timing":
		case strings.HasSuffix(key, "_unavailable"):
			_ = json.Unmarshal(v, &step(strings.TrimSuffix(key, "_unavailable")).Unavailable)
		case bytes.HasPrefix(bytes.TrimSpace(v), []byte("{")):
			step(key).Build = v
		}
	}
	for key, v := range timing {
		for suffix, set := range map[string]func(*PreparedStrategy, float64){
			"_record_ms": func(p *PreparedStrategy, ms float64) { p.RecordMS = ms },
			"_build_ms":  func(p *PreparedStrategy, ms float64) { p.BuildMS = ms }} {
			var ms float64
			if k, ok := strings.CutSuffix(key, suffix); ok && json.Unmarshal(v, &ms) == nil {
				set(step(k), ms)
			}
		}
	}
	return nil
}
