package memlayout

import (
	"github.com/thaw-dev/thaw/wire"

	"math"
	"slices"
)

// LSRegion is one loading-set region: Pages guest pages from page Start,
// stored in the loading-set file at byte offset FileOff (page-aligned).
// Group is the lowest working-set group of any working-set page in it.
type LSRegion struct {
	Start   uint64 `json:"start"`
	Pages   uint64 `json:"pages"`
	Group   uint32 `json:"group"`
	FileOff uint64 `json:"file_off"`
}

// PageRun is the guest range of l (§4.6 loading-set region).
func (l LSRegion) PageRun() PageRun { return PageRun{Start: l.Start, Pages: l.Pages} }

// LoadingSetStats counts what planLoadingSet did (part of the API).
type LoadingSetStats = wire.LoadingSetStats

// planLoadingSet plans the FaaSnap loading set and the layout of the
// loading-set file, and counts what it did.
//
//  1. Working set: the pages of order (first-appearance order, as Recorder
//     returns it), in groups of groupSize (see Groups; <= 0 means 1024).
//  2. Loading set (FaaSnap §4.6): the working-set pages that lie in a
//     non-zero region (nonzero as ZeroScan returns it; it is normalized
//     first). Pages outside every non-zero region, including pages beyond
//     the memory, are zero and dropped: §4.5 maps them anonymous.
//  3. Runs: maximal runs of consecutive loading-set pages.
//  4. Merging (§4.6): the gap between two runs that follow each other in
//     address order is the number of pages strictly between them (the
//     first run's last page is e, the next run's first page is e+gap+1).
//     When gap <= mergeGap the two runs are in the same region, which also
//     covers the gap pages (zero pages or pages outside the working set:
//     they are stored in the loading-set file, zeros or cold data, which is
//     correct since the file holds exactly the memory's bytes). Because
//     merging never changes a gap, this is a plain partition: regions are
//     the runs chained by gaps <= mergeGap. mergeGap 0 disables merging
//     (runs are maximal, so gaps are >= 1). The paper's threshold is 32.
//  5. Group (§4.5: "the lowest group number of any page in the region"):
//     the lowest group of any working-set page in the region, counting
//     zero working-set pages inside merged gaps, since they too are then
//     read from the loading-set file.
//  6. File layout (§4.7): regions sorted by (Group, Start) and stored
//     contiguously in that order, so FileOff is the byte offset after all
//     earlier regions (page-aligned; a partial last page of memory takes a
//     whole page).
//
// thaw differs from the paper only in numbering groups from 0 and in
// defining the gap and the group of merged regions precisely, as above.
func planLoadingSet(order []uint64, groupSize int, nonzero []PageRun, mergeGap uint64) ([]LSRegion, LoadingSetStats) {
	ws := Groups(order, groupSize)
	nz := Normalize(nonzero)
	var (
		st      LoadingSetStats
		out     []LSRegion
		cur     LSRegion // the region being built, valid when cur.Pages > 0
		gapMin  = uint32(math.MaxUint32)
		j       int
		haveGap bool
	)
	st.WorkingSetPages = uint64(len(ws))
	for _, w := range ws {
		for j < len(nz) && nz[j].End() <= w.Page {
			j++
		}
		if j >= len(nz) || !nz[j].Contains(w.Page) { // a zero working-set page
			st.ZeroPagesInWorkingSet++
			if cur.Pages > 0 { // in the gap after cur, if the next run merges
				gapMin, haveGap = min(gapMin, w.Group), true
			}
			continue
		}
		st.LoadingSetPages++
		switch {
		case cur.Pages > 0 && w.Page == cur.Start+cur.Pages: // the run goes on
			cur.Pages++
			cur.Group = min(cur.Group, w.Group)
		case cur.Pages > 0 && w.Page-(cur.Start+cur.Pages) <= mergeGap: // merge
			st.RegionsBeforeMerge++
			cur.Pages = w.Page + 1 - cur.Start
			cur.Group = min(cur.Group, w.Group)
			if haveGap {
				cur.Group = min(cur.Group, gapMin)
			}
		default:
			st.RegionsBeforeMerge++
			if cur.Pages > 0 {
				out = append(out, cur)
			}
			cur = LSRegion{Start: w.Page, Pages: 1, Group: w.Group}
		}
		gapMin, haveGap = math.MaxUint32, false
	}
	if cur.Pages > 0 {
		out = append(out, cur)
	}
	slices.SortFunc(out, func(a, b LSRegion) int {
		if a.Group != b.Group {
			return cmpU64(uint64(a.Group), uint64(b.Group))
		}
		return cmpU64(a.Start, b.Start)
	})
	var off, stored uint64
	for i := range out {
		out[i].FileOff = off
		off += out[i].Pages * PageSize
		stored += out[i].Pages
	}
	st.GapPages = stored - st.LoadingSetPages
	st.RegionsAfterMerge = uint64(len(out))
	return out, st
}
