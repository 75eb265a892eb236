package pagecache

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
)

// Page runs of a file and the page cache: reading them ahead, and which of
// their pages are resident (snapbpf's prefetch).

// SplitRuns cuts ranges into pieces of at most max pages, in order.
func SplitRuns(ranges []memlayout.PageRun, max uint64) []memlayout.PageRun {
	var out []memlayout.PageRun
	for _, r := range ranges {
		for p := r.Start; p < r.End(); p += max {
			out = append(out, memlayout.PageRun{Start: p, Pages: min(max, r.End()-p)})
		}
	}
	return out
}

// Readahead asks the kernel to read ranges of f into the page cache, in
// order, at most chunk bytes per call (readahead(2)); it returns the
// number of calls.
func Readahead(f *os.File, chunk uint64, ranges []memlayout.PageRun) (int, error) {
	calls := 0
	for _, r := range ranges {
		for off, end := r.Offset(), r.Offset()+r.Bytes(); off < end; off += chunk {
			n := min(chunk, end-off)
			_, _, errno := unix.Syscall(unix.SYS_READAHEAD, f.Fd(), uintptr(off), uintptr(n))
			calls++
			if errno != 0 {
				return calls, fmt.Errorf("readahead %s at %d: %w", f.Name(), off, errno)
			}
		}
	}
	return calls, nil
}

// Residency returns the runs of ranges whose pages are not resident in the
// page cache (m maps the whole file) and how many pages are.
func Residency(m []byte, ranges []memlayout.PageRun) ([]memlayout.PageRun, uint64, error) {
	var missing []memlayout.PageRun
	var resident uint64
	vec := make([]byte, 0, 512)
	for _, r := range ranges {
		lo, hi := r.Offset(), min(r.Offset()+r.Bytes(), uint64(len(m)))
		if lo >= hi {
			continue
		}
		n := int((hi - lo + memlayout.PageSize - 1) / memlayout.PageSize)
		if cap(vec) < n {
			vec = make([]byte, n)
		}
		vec = vec[:n]
		if err := Mincore(m[lo:hi], vec); err != nil {
			return nil, resident, fmt.Errorf("mincore: %w", err)
		}
		for i, b := range vec {
			p := r.Start + uint64(i)
			if b&1 != 0 {
				resident++
				continue
			}
			if k := len(missing); k > 0 && missing[k-1].End() == p {
				missing[k-1].Pages++
			} else {
				missing = append(missing, memlayout.PageRun{Start: p, Pages: 1})
			}
		}
	}
	return missing, resident, nil
}
