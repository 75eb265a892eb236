package memlayout

import (
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"slices"
)

// FaaSnapOptions tunes WriteFaaSnap.
type FaaSnapOptions struct {
	// GroupSize is N of §4.3; 0 means DefaultGroupSize (1024).
	GroupSize int
	// MergeGap is the §4.6 merge threshold in pages (see LoadingSet); 0
	// means DefaultMergeGap (32) and a negative value disables merging.
	MergeGap int
	// Freed are pages the guest freed during the recording (zero in the
	// memory file only because free page reporting dropped them); they are
	// counted as non-zero, which switches §4.5's freed-page filtering off
	// (the ablation). Pages outside the memory are an error.
	Freed []uint64
}

func (o FaaSnapOptions) effective() (groupSize int, mergeGap uint64) {
	groupSize = o.GroupSize
	if groupSize <= 0 {
		groupSize = DefaultGroupSize
	}
	switch {
	case o.MergeGap == 0:
		mergeGap = DefaultMergeGap
	case o.MergeGap > 0:
		mergeGap = uint64(o.MergeGap)
	}
	return groupSize, mergeGap
}

// FaaSnapArtifact is the manifest faasnap.json of a FaaSnap artifact
// directory, which also holds the loading-set file loadingset.bin.
type FaaSnapArtifact struct {
	ArtifactHeader
	GroupSize int    `json:"group_size"`
	MergeGap  uint64 `json:"merge_gap"`
	// NonzeroRegions are the memory file's non-zero regions (ZeroScan):
	// sorted, maximal, in bounds.
	NonzeroRegions []PageRun `json:"nonzero_regions"`
	// LoadingRegions are the loading-set regions in loading-set file order
	// (Group, Start), FileOff contiguous from 0 (LoadingSet).
	LoadingRegions []LSRegion `json:"loading_regions"`
	// LoadingSetFile describes loadingset.bin.
	LoadingSetFile FileRef         `json:"loading_set_file"`
	Stats          LoadingSetStats `json:"stats"`
	// Checksum is the SHA-256 of the manifest's JSON encoding with this
	// field empty.
	Checksum string `json:"checksum"`
}

// checksum, format, normalize and validate make it a manifest (manifest.go).
func (a *FaaSnapArtifact) checksum() *string { return &a.Checksum }
func (a *FaaSnapArtifact) format() artifactFormat {
	return artifactFormat{magic: FaaSnapMagic, manifest: FaaSnapManifestFile, data: LoadingSetDataFile, dataRef: &a.LoadingSetFile}
}

func (a *FaaSnapArtifact) normalize() {
	a.NonzeroRegions, a.LoadingRegions = orEmpty(a.NonzeroRegions), orEmpty(a.LoadingRegions)
}

// validate (the §4.5–§4.7 invariants, see DecodeFaaSnap) checks the
// structure: regions non-empty, in bounds, sorted and non-overlapping; loading regions in (group, start) order with contiguous
// file offsets that add up to the loading-set file's size, starting and
// ending on non-zero pages, with groups the working set can have; stats
// consistent with the regions.
func (a *FaaSnapArtifact) validate(pages uint64) error {
	if a.GroupSize < 1 {
		return fmt.Errorf("%w: group size %d", ErrCorrupt, a.GroupSize)
	}
	var nonzeroPages uint64
	for i, r := range a.NonzeroRegions {
		if err := checkRegion("non-zero region", i, r, pages); err != nil {
			return err
		}
		if i > 0 && r.Start <= a.NonzeroRegions[i-1].End() {
			return fmt.Errorf("%w: non-zero regions not sorted, disjoint and maximal at %d", ErrCorrupt, i)
		}
		nonzeroPages += r.Pages
	}
	st := a.Stats
	if st.LoadingSetPages > st.WorkingSetPages || st.WorkingSetPages-st.LoadingSetPages != st.ZeroPagesInWorkingSet ||
		st.WorkingSetPages > pages || st.LoadingSetPages > nonzeroPages {
		return fmt.Errorf("%w: inconsistent working set stats", ErrCorrupt)
	}
	groups := (st.WorkingSetPages + uint64(a.GroupSize) - 1) / uint64(a.GroupSize)
	var off uint64
	for i, l := range a.LoadingRegions {
		r := l.PageRun()
		if err := checkRegion("loading region", i, r, pages); err != nil {
			return err
		}
		if i > 0 {
			p := a.LoadingRegions[i-1]
			if l.Group < p.Group || l.Group == p.Group && l.Start <= p.Start {
				return fmt.Errorf("%w: loading regions not in (group, start) order at %d", ErrCorrupt, i)
			}
		}
		if uint64(l.Group) >= groups {
			return fmt.Errorf("%w: loading region %d has group %d, the working set has %d groups", ErrCorrupt, i, l.Group, groups)
		}
		if FindRegion(a.NonzeroRegions, r.Start) < 0 || FindRegion(a.NonzeroRegions, r.End()-1) < 0 {
			return fmt.Errorf("%w: loading region %d does not start and end on non-zero pages", ErrCorrupt, i)
		}
		if l.FileOff != off {
			return fmt.Errorf("%w: loading region %d at file offset %d, want %d", ErrCorrupt, i, l.FileOff, off)
		}
		if r.Pages > pages-off/PageSize { // keeps off <= pages*PageSize: no overflow
			return fmt.Errorf("%w: loading regions hold more pages than memory", ErrCorrupt)
		}
		off += r.Bytes()
	}
	// Disjointness in guest memory.
	sorted := make([]PageRun, len(a.LoadingRegions))
	for i, l := range a.LoadingRegions {
		sorted[i] = l.PageRun()
	}
	sortRegions(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i].Start < sorted[i-1].End() {
			return fmt.Errorf("%w: loading regions overlap at page %d", ErrCorrupt, sorted[i].Start)
		}
	}
	stored := off / PageSize
	if err := checkDataSize(LoadingSetDataFile, a.LoadingSetFile, stored); err != nil {
		return err
	}
	if st.GapPages > stored || stored-st.GapPages != st.LoadingSetPages ||
		st.RegionsAfterMerge != uint64(len(a.LoadingRegions)) ||
		st.RegionsBeforeMerge < st.RegionsAfterMerge || st.RegionsBeforeMerge > st.LoadingSetPages ||
		st.GapPages < st.RegionsBeforeMerge-st.RegionsAfterMerge {
		return fmt.Errorf("%w: inconsistent loading set stats", ErrCorrupt)
	}
	return nil
}

// LoadingSetPath is the path of the artifact's loading-set file (§4.7; the
// shim's THAW_SHIM_LSFILE).
func (a *FaaSnapArtifact) LoadingSetPath() string { return filepath.Join(a.Dir, LoadingSetDataFile) }

// WriteFaaSnap builds the FaaSnap artifact of the memory file at memPath
// from the working set order (first-appearance order, as Recorder.Pages
// returns it) and writes it to dir (created if needed): loadingset.bin, the
// loading-set pages copied from the memory file in FileOff order (pure page
// data, page-aligned, so it can be read with O_DIRECT), then faasnap.json.
// Both are written under temporary names, fsynced and renamed. It scans the
// memory file once for zero pages and its SHA-256; memSHA256 (the snapshot
// manifest's digest) must match it (ErrMismatch) unless empty. Pages of
// order outside the memory file are an error; repeated pages count once.
// As in FaaSnap's Figure 5, order may come from recording an invocation
// restored from another ("clean") snapshot of the same guest shape, while
// memPath is the warm snapshot taken after it: the artifact is bound to
// memPath only.
//
// FaaSnap §4.5–§4.7 and Figure 5 ("FaaSnap then scans the new memory file to
// find non-zero pages. The loading set is the intersection between the
// working set and non-zero pages. Adjacent loading set regions are merged
// ... The loading set is then stored into a compact loading set file in the
// order of group numbers and the region offsets are recorded"). thaw
// differs in keeping the regions in a self-describing, versioned,
// checksummed manifest bound to the exact memory file (the paper caches them
// in the daemon), and in padding a partial last page to a whole page.
func WriteFaaSnap(dir, memPath, memSHA256 string, order []uint64, opts FaaSnapOptions) (*FaaSnapArtifact, error) {
	mem, err := openMemory(memPath, memSHA256, order)
	if err != nil {
		return nil, err
	}
	defer mem.Close()
	h := sha256.New()
	nonzero, zs, err := scanFile(memPath, h)
	if err != nil {
		return nil, err
	}
	if err := mem.hashed(zs.Size, hexSum(h)); err != nil {
		return nil, err
	}
	if err := mem.checkPages(opts.Freed); err != nil {
		return nil, err
	}
	if len(opts.Freed) > 0 {
		nonzero = Normalize(append(nonzero, Runs(slices.Sorted(slices.Values(opts.Freed)))...))
	}
	groupSize, mergeGap := opts.effective()
	ls, st := planLoadingSet(order, groupSize, nonzero, mergeGap)
	regions := make([]PageRun, len(ls))
	for i, l := range ls {
		regions[i] = l.PageRun()
	}
	return writeManifest(&FaaSnapArtifact{
		ArtifactHeader: ArtifactHeader{Dir: dir, Memory: mem.ref()},
		GroupSize:      groupSize,
		MergeGap:       mergeGap,
		NonzeroRegions: nonzero,
		LoadingRegions: ls,
		Stats:          st,
	}, mem, regions)
}

// Encode seals the manifest (magic, version, page size, checksum) and
// returns its canonical JSON. FaaSnap §4.7 only says the region offsets "are
// recorded" (cached in the daemon); the sealed, versioned file is thaw's.
func (a *FaaSnapArtifact) Encode() ([]byte, error) { return encodeManifest(a) }

// ReadFaaSnap reads dir/faasnap.json, checks it (DecodeFaaSnap) and checks
// that dir/loadingset.bin has the recorded size. A missing manifest is
// reported as fs.ErrNotExist. Use Verify before restoring from it. (FaaSnap
// §4.7's test phase reads the recorded offsets; thaw reads them from disk
// and refuses damaged ones.)
func ReadFaaSnap(dir string) (*FaaSnapArtifact, error) { return readManifest[FaaSnapArtifact](dir) }

// Verify checks that the artifact was built from the snapshot memory file of
// memSize bytes and digest memSHA256 (ErrMismatch otherwise) and that its
// loading-set file has the recorded size and, when full, the recorded
// SHA-256 (ErrCorrupt otherwise). No paper section: FaaSnap (Figure 5)
// always uses the memory file and loading-set file of the same record
// phase; thaw keeps artifacts apart from snapshots and so must prove the
// pairing (the mapping of §4.5 mixes both files page by page).
func (a *FaaSnapArtifact) Verify(memSize int64, memSHA256 string, full bool) error {
	return verifyData(&a.ArtifactHeader, LoadingSetDataFile, a.LoadingSetFile, memSize, memSHA256, full)
}
