package restore

import (
	"fmt"
	"path/filepath"
	"slices"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/wire"
)

// FaaSnap variants: all of FaaSnap with techniques switched off, for the
// paper's Figure 9 (§6.5) and the technique-off table (docs/bench/ablation.md).
// Each is a restore of the faasnap strategy chosen per
// invocation (Env.Variant).
const (
	// VariantConcurrent is Figure 9's "concurrent paging" (§4.2 alone):
	// the memory file mapped whole, as vanilla; the loader reads the
	// working set's pages from the memory file in address order.
	VariantConcurrent = wire.VariantConcurrent
	// VariantNoLoadingSet is Figure 9's "per-region mapping" (§4.2-§4.5):
	// zero regions anonymous, non-zero regions from the memory file, the
	// loader reading the loading set from the memory file in group order;
	// no loading-set file (§4.7 off).
	VariantNoLoadingSet = wire.VariantNoLoadingSet
	// VariantNoHostRecording builds the working set from the pages the
	// guest faulted (REAP's userfaultfd recording) instead of the host
	// pages mincore sees (§4.4 off).
	VariantNoHostRecording = wire.VariantNoHostRec
	// VariantNoFreedFilter keeps the pages the guest freed during the
	// recording in the loading set (§4.5's freed-page handling off).
	VariantNoFreedFilter = wire.VariantNoFreed
	// VariantNoMerge keeps every loading-set run its own region (§4.6's
	// merging off).
	VariantNoMerge = wire.VariantNoMerge
)

// FaaSnapVariants lists the variants in the order the ablation reports them.
var FaaSnapVariants = []string{VariantConcurrent, VariantNoLoadingSet, VariantNoHostRecording, VariantNoFreedFilter, VariantNoMerge}

// builtVariants are the variants with artifacts of their own, built by
// prepare when asked (RecordOptions.Variants); the others restore all of
// FaaSnap's artifact differently.
var builtVariants = []string{VariantNoHostRecording, VariantNoFreedFilter, VariantNoMerge}

// faasnapArtifactDir is where variant's artifact lives: the strategy's
// own directory, or variants/<name> under it for a built variant.
func faasnapArtifactDir(snap Snapshot, variant string) string {
	dir := snap.ArtifactDir(FaaSnap)
	if slices.Contains(builtVariants, variant) {
		dir = filepath.Join(dir, "variants", variant)
	}
	return dir
}

// CheckVariant refuses a variant st does not have ("" is st itself).
func (st Strategy) CheckVariant(variant string) error {
	if variant == "" || slices.Contains(st.Variants, variant) {
		return nil
	}
	if len(st.Variants) == 0 {
		return fmt.Errorf("strategy %s has no variants (variant %q)", st.Kind, variant)
	}
	return fmt.Errorf("strategy %s has no variant %q (one of: %v)", st.Kind, variant, st.Variants)
}

// loaderExtents is what the loader of variant reads from the memory file
// (nil: the loading-set file, whole): the loading regions in group order
// without the loading-set file, in address order for concurrent paging
// alone (§4.2 predates the working-set groups of §4.3).
func loaderExtents(art *memlayout.FaaSnapArtifact, variant string) []Extent {
	var rs []memlayout.PageRun
	switch variant {
	case VariantNoLoadingSet:
		for _, l := range art.LoadingRegions {
			rs = append(rs, l.PageRun())
		}
	case VariantConcurrent:
		for _, l := range art.LoadingRegions {
			rs = append(rs, l.PageRun())
		}
		rs = memlayout.Normalize(rs)
	default:
		return nil
	}
	ext := make([]Extent, 0, len(rs))
	for _, r := range rs {
		ext = append(ext, Extent{Off: int64(r.Offset()), Len: int64(r.Bytes())})
	}
	return ext
}
