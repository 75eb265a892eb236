package memlayout

import (
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

// seq returns pages lo..hi-1.
func seq(lo, hi uint64) []uint64 {
	var s []uint64
	for p := lo; p < hi; p++ {
		s = append(s, p)
	}
	return s
}

func cat(parts ...[]uint64) []uint64 { return slices.Concat(parts...) }

func TestLoadingSet(t *testing.T) {
	all := []PageRun{{0, 1 << 20}} // everything non-zero
	for _, tc := range []struct {
		name    string
		order   []uint64
		group   int
		nonzero []PageRun
		gap     uint64
		want    []LSRegion
	}{
		{"empty working set", nil, 4, all, 32, nil},
		{"one run", seq(10, 20), 100, all, 32, []LSRegion{{10, 10, 0, 0}}},
		// Run A ends at page 9, run B starts at 42: 32 pages (10..41)
		// strictly between them.
		{"gap 32 merges at threshold 32", cat(seq(0, 10), seq(42, 50)), 100, all, 32,
			[]LSRegion{{0, 50, 0, 0}}},
		{"gap 33 does not merge at threshold 32", cat(seq(0, 10), seq(43, 50)), 100, all, 32,
			[]LSRegion{{0, 10, 0, 0}, {43, 7, 0, 10 * PageSize}}},
		{"gap 1 merges", []uint64{5, 7}, 100, all, 32, []LSRegion{{5, 3, 0, 0}}},
		{"merge gap 0 never merges", []uint64{5, 7}, 100, all, 0,
			[]LSRegion{{5, 1, 0, 0}, {7, 1, 0, PageSize}}},
		{"merge gap 1", []uint64{1, 3, 6}, 100, all, 1,
			[]LSRegion{{1, 3, 0, 0}, {6, 1, 0, 3 * PageSize}}},
		{"chains merge", []uint64{0, 30, 60, 90}, 100, all, 32, []LSRegion{{0, 91, 0, 0}}},
		{"zero pages excluded", seq(0, 10), 100, []PageRun{{0, 3}, {7, 3}}, 0,
			[]LSRegion{{0, 3, 0, 0}, {7, 3, 0, 3 * PageSize}}},
		{"zero pages in gaps are stored when merging", seq(0, 10), 100, []PageRun{{0, 3}, {7, 3}}, 32,
			[]LSRegion{{0, 10, 0, 0}}},
		{"non-zero pages outside the working set fill gaps", []uint64{0, 5}, 100, all, 32,
			[]LSRegion{{0, 6, 0, 0}}},
		{"pages beyond memory are zero", []uint64{3, 1000}, 100, []PageRun{{0, 10}}, 32,
			[]LSRegion{{3, 1, 0, 0}}},
		{"only zero pages", seq(0, 5), 100, nil, 32, nil},
		// Groups of 2: pages 50,51 -> 0; 10,11 -> 1; 30,31 -> 2.
		{"order by group then start", []uint64{50, 51, 10, 11, 30, 31}, 2, all, 0,
			[]LSRegion{{50, 2, 0, 0}, {10, 2, 1, 2 * PageSize}, {30, 2, 2, 4 * PageSize}}},
		{"same group by start", []uint64{30, 10, 20}, 10, all, 0,
			[]LSRegion{{10, 1, 0, 0}, {20, 1, 0, PageSize}, {30, 1, 0, 2 * PageSize}}},
		// Group = min group of the run: page 11 (group 0) is in 10..12.
		{"group is the minimum in a run", []uint64{100, 11, 12, 10}, 1, all, 0,
			[]LSRegion{{100, 1, 0, 0}, {10, 3, 1, PageSize}}},
		{"group is the minimum after merging", []uint64{100, 60, 20}, 1, all, 50,
			[]LSRegion{{20, 81, 0, 0}}},
		// Pages 20 and 40 (groups 1 and 2) merge across zero pages 21..39;
		// working-set zero page 30 has group 0 and so gives the region its
		// group. Page 70 (group 3) stays apart: its gap is 29 > 20.
		{"zero working-set page in a merged gap gives its group", []uint64{30, 20, 40, 70}, 1,
			[]PageRun{{20, 1}, {40, 1}, {70, 1}}, 20,
			[]LSRegion{{20, 21, 0, 0}, {70, 1, 3, 21 * PageSize}}},
		// The same zero page outside any merged region counts for nothing.
		{"zero working-set page outside regions ignored", []uint64{30, 20, 40}, 1,
			[]PageRun{{20, 1}, {40, 1}}, 5,
			[]LSRegion{{20, 1, 1, 0}, {40, 1, 2, PageSize}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := LoadingSet(tc.order, tc.group, tc.nonzero, tc.gap)
			if len(got) != 0 || len(tc.want) != 0 {
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("LoadingSet = %v, want %v", got, tc.want)
				}
			}
			ref := refLoadingSet(tc.order, tc.group, tc.nonzero, tc.gap, 2000)
			if len(got) != 0 || len(ref) != 0 {
				if !reflect.DeepEqual(got, ref) {
					t.Fatalf("LoadingSet = %v, reference %v", got, ref)
				}
			}
		})
	}
}

func TestLoadingSetStats(t *testing.T) {
	// Working set: 0..9 (zero: 3..6) and 50, 51 (order 50 51 0..9, groups
	// of 4: 50 51 0 1 are group 0). 0..9 merge across 3..6; 50 is 40
	// pages after 9 and stays apart.
	order := cat([]uint64{50, 51}, seq(0, 10))
	nz := []PageRun{{0, 3}, {7, 3}, {50, 2}}
	ls, st := planLoadingSet(order, 4, nz, 32)
	want := LoadingSetStats{
		WorkingSetPages: 12, LoadingSetPages: 8, ZeroPagesInWorkingSet: 4,
		GapPages: 4, RegionsBeforeMerge: 3, RegionsAfterMerge: 2,
	}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if !reflect.DeepEqual(ls, []LSRegion{{0, 10, 0, 0}, {50, 2, 0, 10 * PageSize}}) {
		t.Errorf("regions %v", ls)
	}
}

// refLoadingSet is a page-by-page model of LoadingSet over memories of
// pages pages, written from its documentation.
func refLoadingSet(order []uint64, groupSize int, nonzero []PageRun, mergeGap uint64, pages uint64) []LSRegion {
	if groupSize <= 0 {
		groupSize = DefaultGroupSize
	}
	group := map[uint64]uint32{}
	n := 0
	for _, p := range order {
		if _, ok := group[p]; !ok {
			group[p] = uint32(n / groupSize)
			n++
		}
	}
	isNZ := make([]bool, pages)
	for _, r := range nonzero {
		for p := r.Start; p < r.End() && p < pages; p++ {
			isNZ[p] = true
		}
	}
	inLS := func(p uint64) bool { _, ws := group[p]; return ws && p < pages && isNZ[p] }
	// Runs.
	var runs []PageRun
	for p := uint64(0); p < pages; p++ {
		if !inLS(p) {
			continue
		}
		if k := len(runs); k > 0 && runs[k-1].End() == p {
			runs[k-1].Pages++
		} else {
			runs = append(runs, PageRun{p, 1})
		}
	}
	// Merge.
	var merged []PageRun
	for _, r := range runs {
		if k := len(merged); k > 0 && r.Start-merged[k-1].End() <= mergeGap {
			merged[k-1].Pages = r.End() - merged[k-1].Start
		} else {
			merged = append(merged, r)
		}
	}
	var out []LSRegion
	for _, r := range merged {
		g := ^uint32(0)
		for p := r.Start; p < r.End(); p++ {
			if gg, ok := group[p]; ok {
				g = min(g, gg)
			}
		}
		out = append(out, LSRegion{Start: r.Start, Pages: r.Pages, Group: g})
	}
	slices.SortFunc(out, func(a, b LSRegion) int {
		if a.Group != b.Group {
			return int(a.Group) - int(b.Group)
		}
		return cmpU64(a.Start, b.Start)
	})
	var off uint64
	for i := range out {
		out[i].FileOff = off
		off += out[i].Pages * PageSize
	}
	return out
}

func TestLoadingSetRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 500 {
		pages := uint64(1 + rng.IntN(600))
		var nz []PageRun
		for p := uint64(0); p < pages; {
			n := uint64(1 + rng.IntN(30))
			if rng.IntN(2) == 0 {
				nz = append(nz, PageRun{p, min(n, pages-p)})
			}
			p += n
		}
		order := make([]uint64, rng.IntN(int(pages)+10))
		for j := range order {
			order[j] = uint64(rng.IntN(int(pages) + 5)) // some beyond memory, some repeated
		}
		groupSize := rng.IntN(20) - 2
		gap := uint64(rng.IntN(40))
		got, st := planLoadingSet(order, groupSize, nz, gap)
		want := refLoadingSet(order, groupSize, nz, gap, pages+5)
		if len(got) != 0 || len(want) != 0 {
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("case %d: got %v\nwant %v", i, got, want)
			}
		}
		var stored uint64
		for _, l := range got {
			stored += l.Pages
		}
		if st.LoadingSetPages+st.ZeroPagesInWorkingSet != st.WorkingSetPages ||
			st.LoadingSetPages+st.GapPages != stored || st.RegionsAfterMerge != uint64(len(got)) ||
			st.RegionsBeforeMerge < st.RegionsAfterMerge {
			t.Fatalf("case %d: stats %+v stored %d", i, st, stored)
		}
	}
}
