// Package memlayout plans the guest memory layouts of thaw's restore
// strategies from a snapshot's memory file, and writes and reads the
// artifacts those strategies restore from:
//
//   - FaaSnap (Ao et al., EuroSys '22, §4.3–4.8): working-set groups recorded
//     with mincore, the non-zero regions of the memory file, the loading set
//     (working set minus zero pages, merged across small gaps) stored group by
//     group in a compact loading-set file, and the overlapping-mmap layout
//     table the QEMU interposer applies (docs/shim-layout.md).
//   - REAP (Ustiugov et al., ASPLOS '21): the pages faulted during the record
//     invocation, stored contiguously in fault order in a working-set file.
//
// Everything here is pure planning and file formatting: no VM is involved.
// Units are pages of snapshot.PageSize (4096) bytes unless a name says Bytes;
// a memory file is raw guest RAM (file offset = guest physical address). A
// memory file whose size is not a multiple of the page size (only synthetic
// ones) has a partial last page, which is a page like any other; whenever
// such a page is stored in an artifact it is padded with zeros to a whole
// page so every artifact data file stays page-aligned.
//
// Critical invariants: artifacts become visible under their final names only
// complete and fsynced; a reader refuses any manifest whose magic, version,
// page size, self-checksum or structure is wrong, and an artifact is only
// used with the memory file (size and SHA-256) it was built from.
package memlayout

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// PageSize is snapshot.PageSize as an unsigned value.
const PageSize uint64 = snapshot.PageSize

// Defaults from the FaaSnap paper.
const (
	// DefaultGroupSize is N of §4.3: "we find N = 1024 works well".
	DefaultGroupSize = 1024
	// DefaultMergeGap is the §4.6 "distance threshold for merging two
	// regions ... empirically set to 32 pages".
	DefaultMergeGap uint64 = 32
)

// Sentinel errors; they are wrapped with the file concerned.
var (
	// ErrCorrupt means an artifact's manifest or data file is damaged or
	// inconsistent (bad JSON, magic, checksum, structure, size or digest).
	ErrCorrupt = errors.New("memory layout artifact corrupt")
	// ErrMismatch means an artifact was built from another memory file than
	// the one it is being used (or built) with.
	ErrMismatch = errors.New("memory layout artifact built from another memory file")
	// ErrIncompatible means an artifact has a format version newer than this
	// thaw reads, or another page size.
	ErrIncompatible = errors.New("memory layout artifact incompatible")
)

// PageRun is a run of Pages guest pages starting at page Start: a FaaSnap
// §4.5 region, or a run of a REAP page list. In JSON it is the pair
// [start, pages]. Its methods are plain helpers (no paper section).
type PageRun struct {
	Start, Pages uint64
}

// End is the first page after r. Callers must know Start+Pages does not
// overflow (every region this package builds or accepts is checked).
func (r PageRun) End() uint64 { return r.Start + r.Pages }

// Contains reports whether page p is in r.
func (r PageRun) Contains(p uint64) bool { return p >= r.Start && p-r.Start < r.Pages }

// Offset is r's first byte in guest memory.
func (r PageRun) Offset() uint64 { return r.Start * PageSize }

// Bytes is r's length in bytes, counting a partial last page of memory as a
// whole page.
func (r PageRun) Bytes() uint64 { return r.Pages * PageSize }

// MarshalJSON encodes r as [start,pages].
func (r PageRun) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "[%d,%d]", r.Start, r.Pages), nil
}

// UnmarshalJSON decodes [start,pages]; anything else is an error.
func (r *PageRun) UnmarshalJSON(b []byte) error {
	var v []uint64
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	if len(v) != 2 {
		return fmt.Errorf("region %s is not a pair [start,pages]", truncate(b))
	}
	r.Start, r.Pages = v[0], v[1]
	return nil
}

// PagesOf returns the number of pages (of PageSize) in a memory of size
// bytes, counting a partial last page. (No paper section: the papers' guest
// memories are whole pages; thaw's synthetic test files need not be.)
func PagesOf(size int64) uint64 {
	if size <= 0 {
		return 0
	}
	return (uint64(size) + PageSize - 1) / PageSize
}

// CountPages returns the total number of pages in rs (a helper, no paper
// section; it does not guard against overflow for hostile input).
func CountPages(rs []PageRun) uint64 {
	var n uint64
	for _, r := range rs {
		n += r.Pages
	}
	return n
}

// Normalize returns rs sorted by start with empty regions dropped and
// overlapping or adjacent regions merged: the maximal runs covering the same
// pages. rs is not modified; no region may extend past page 2^64-1.
//
// FaaSnap §4.5 ("merging consecutive ... non-zero pages into non-zero
// regions"); thaw also uses it to accept caller-supplied region lists in any
// order.
func Normalize(rs []PageRun) []PageRun {
	s := make([]PageRun, 0, len(rs))
	for _, r := range rs {
		if r.Pages > 0 {
			s = append(s, r)
		}
	}
	sortRegions(s)
	out := s[:0]
	for _, r := range s {
		if n := len(out); n > 0 && r.Start <= out[n-1].End() {
			if e := r.End(); e > out[n-1].End() {
				out[n-1].Pages = e - out[n-1].Start
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// Runs encodes a page sequence as runs of consecutive pages, keeping the
// sequence's order: pages [5 6 7 2 3 9] are runs [5,3] [2,2] [9,1]. Expand is
// its inverse.
//
// REAP's record phase keeps the faulted pages' offsets in fault order; the
// run encoding is thaw's (REAP stores one offset per page), compact because
// guest faults come in sequential bursts.
func Runs(pages []uint64) []PageRun {
	var out []PageRun
	for _, p := range pages {
		// p != 0: a run ending at the last uint64 page must not wrap.
		if n := len(out); n > 0 && p != 0 && out[n-1].End() == p {
			out[n-1].Pages++
			continue
		}
		out = append(out, PageRun{Start: p, Pages: 1})
	}
	return out
}

// Expand lists the pages of runs in order (the inverse of Runs): the page
// order of a REAP working-set file (thaw's encoding, see Runs).
func Expand(runs []PageRun) []uint64 {
	out := make([]uint64, 0, CountPages(runs))
	for _, r := range runs {
		for i := range r.Pages {
			out = append(out, r.Start+i)
		}
	}
	return out
}

// FindRegion returns the index of the region of sorted, non-overlapping rs
// that contains page p, or -1. (Helper: the §4.5 "is this page non-zero"
// question.)
func FindRegion(rs []PageRun, p uint64) int {
	i, _ := slices.BinarySearchFunc(rs, p, func(r PageRun, p uint64) int {
		switch {
		case r.End() <= p:
			return -1
		case r.Start > p:
			return 1
		}
		return 0
	})
	if i < len(rs) && rs[i].Contains(p) {
		return i
	}
	return -1
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "..."
	}
	return string(b)
}

func sortRegions(rs []PageRun) {
	slices.SortFunc(rs, func(a, b PageRun) int { return cmpU64(a.Start, b.Start) })
}
