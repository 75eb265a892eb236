package memlayout

import (
	"math"
	"slices"
)

// Recorder turns successive mincore(2) scans of the guest memory mapping
// into the working set in order of first appearance.
//
// FaaSnap §4.4 (host page recording): "By calling mincore repeatedly,
// FaaSnap records the new pages loaded since the last mincore call. It
// assigns a working set group number to pages using the order they appear in
// the mincore scans." The paper does not say how pages that appear in the
// same scan are ordered; mincore returns a bitmap, so thaw appends them in
// address order. When to scan (FaaSnap §5 waits for the guest RSS to grow by
// 1024 pages) is the caller's business; a page counts once, at its first
// appearance, even if it is later evicted and comes back.
//
// The zero value is ready to use. A Recorder is not safe for concurrent use.
type Recorder struct {
	seen  []uint64 // bitmap of pages already recorded
	order []uint64
	scans int
}

// Observe records one scan: resident has one byte per page of the mapping,
// page i resident when bit 0 of resident[i] is set (the vector mincore
// fills; the other bits are reserved and ignored). Pages resident now and in
// no earlier scan are appended in address order. It returns how many were
// new. Scans may differ in length (the bitmap grows as needed).
func (r *Recorder) Observe(resident []byte) int {
	r.scans++
	if words := (len(resident) + 63) / 64; words > len(r.seen) {
		r.seen = append(r.seen, make([]uint64, words-len(r.seen))...)
	}
	n := 0
	for i, b := range resident {
		if b&1 == 0 {
			continue
		}
		w, bit := i/64, uint64(1)<<(i%64)
		if r.seen[w]&bit != 0 {
			continue
		}
		r.seen[w] |= bit
		r.order = append(r.order, uint64(i))
		n++
	}
	return n
}

// Pages returns the recorded pages in order of first appearance (a copy):
// the §4.4 working set in the §4.3 access order.
func (r *Recorder) Pages() []uint64 { return slices.Clone(r.order) }

// Len is the number of pages recorded so far (§4.4; FaaSnap §5 compares
// the growth of the guest's RSS against it to decide when to scan again).
func (r *Recorder) Len() int { return len(r.order) }

// Scans is the number of Observe calls so far (§4.4 bookkeeping).
func (r *Recorder) Scans() int { return r.scans }

// PageGroup is a working-set page and its working-set group.
type PageGroup struct {
	Page  uint64
	Group uint32
}

// Groups assigns working-set groups: the page at index i of order (the
// first-appearance order; a repeated page is dropped, keeping its first
// occurrence, before indexing) is in group i/groupSize. It returns the working set sorted by page, the
// compact form LoadingSet needs (a map would cost ~10x the memory).
// groupSize <= 0 means DefaultGroupSize. Groups beyond math.MaxUint32
// saturate (that needs more than 16 TiB of memory with group size 1).
//
// FaaSnap §4.3 (working set group): "the first N accessed pages are assigned
// group 1, the next N accessed pages are assigned group 2, etc." thaw numbers
// groups from 0.
func Groups(order []uint64, groupSize int) []PageGroup {
	if groupSize <= 0 {
		groupSize = DefaultGroupSize
	}
	order = dedup(order)
	out := make([]PageGroup, 0, len(order))
	for i, p := range order {
		g := uint64(i) / uint64(groupSize)
		out = append(out, PageGroup{Page: p, Group: uint32(min(g, math.MaxUint32))})
	}
	slices.SortFunc(out, func(a, b PageGroup) int { return cmpU64(a.Page, b.Page) })
	return out
}

// dedup returns order without repeated pages, keeping each page's first
// occurrence, in order. order is not modified; without repeats it is
// returned as is. Neither paper has repeats (mincore and userfaultfd MISSING
// report a page once); thaw tolerates them from callers, e.g. two vCPUs
// faulting the same page before REAP's handler installs it.
func dedup(order []uint64) []uint64 {
	type at struct{ page, idx uint64 }
	s := make([]at, len(order))
	for i, p := range order {
		s[i] = at{p, uint64(i)}
	}
	slices.SortFunc(s, func(a, b at) int {
		if c := cmpU64(a.page, b.page); c != 0 {
			return c
		}
		return cmpU64(a.idx, b.idx)
	})
	var drop []bool
	for i := 1; i < len(s); i++ {
		if s[i].page == s[i-1].page {
			if drop == nil {
				drop = make([]bool, len(order))
			}
			drop[s[i].idx] = true
		}
	}
	if drop == nil {
		return order
	}
	out := make([]uint64, 0, len(order))
	for i, p := range order {
		if !drop[i] {
			out = append(out, p)
		}
	}
	return out
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
