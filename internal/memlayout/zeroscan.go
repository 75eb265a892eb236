package memlayout

import (
	"bytes"
	"errors"
	"fmt"
	"hash"
	"os"

	"golang.org/x/sys/unix"
)

// scanChunk is the read size of ZeroScan (a multiple of PageSize).
const scanChunk = 1 << 20

var (
	zeroChunk = make([]byte, scanChunk)
	zeroPage  = zeroChunk[:PageSize]
)

// ZeroStats describes one ZeroScan.
type ZeroStats struct {
	// Size is the memory file's size in bytes.
	Size int64 `json:"size"`
	// Pages is the number of pages, counting a partial last page.
	Pages uint64 `json:"pages"`
	// ZeroPages and NonzeroPages partition Pages.
	ZeroPages    uint64 `json:"zero_pages"`
	NonzeroPages uint64 `json:"nonzero_pages"`
	// HolePages are zero pages known from SEEK_DATA/SEEK_HOLE without being
	// read (a page partly in a hole is read).
	HolePages uint64 `json:"hole_pages"`
	// ReadBytes is how much of the file was actually read.
	ReadBytes int64 `json:"read_bytes"`
	// Regions is the number of non-zero regions.
	Regions int `json:"regions"`
}

// ZeroScan finds the all-zero pages of the memory file at path and returns
// the non-zero regions: sorted, maximal runs of pages holding at least one
// non-zero byte. Holes (found with SEEK_DATA/SEEK_HOLE) are zero and are not
// read; data is read 1 MiB at a time. A partial last page is a page.
//
// FaaSnap §4.5 (per-region memory mapping: "FaaSnap scans the guest memory
// file, merging consecutive zero pages into zero regions and non-zero pages
// into non-zero regions"). thaw differs in two ways: (1) its snapshots keep
// zero pages as holes (snapshot.CopySparse), so most zero pages cost no read;
// (2) thaw does not modify the guest kernel to sanitize freed pages (the end
// of §4.5), so pages the guest freed but did not clear stay non-zero and go
// to the cold set or the loading set instead of anonymous memory. Group
// numbers for regions (also §4.5) are assigned by LoadingSet, not here.
func ZeroScan(path string) (nonzero []PageRun, stats ZeroStats, err error) {
	return scanFile(path, nil)
}

// scanFile is ZeroScan that, when h is not nil, also feeds every byte of the
// file (holes as zeros) to h, so a digest costs no second pass.
func scanFile(path string, h hash.Hash) ([]PageRun, ZeroStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, ZeroStats{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, ZeroStats{}, err
	}
	if !st.Mode().IsRegular() {
		return nil, ZeroStats{}, fmt.Errorf("zero scan %s: not a regular file", path)
	}
	size := st.Size()
	stats := ZeroStats{Size: size, Pages: PagesOf(size)}
	var nonzero []PageRun
	buf := make([]byte, scanChunk)
	fd := int(f.Fd())
	seekable := true
	hashZeros := func(n int64) {
		if h == nil {
			return
		}
		for n > 0 {
			k := min(n, int64(len(zeroChunk)))
			h.Write(zeroChunk[:k])
			n -= k
		}
	}
	ps := int64(PageSize)
	for off := int64(0); off < size; { // off is page-aligned
		dataStart, dataEnd := off, size
		if seekable {
			d, err := unix.Seek(fd, off, unix.SEEK_DATA)
			switch {
			case errors.Is(err, unix.ENXIO): // only a hole remains
				d = size
			case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
				seekable, d = false, off // no hole support: all data
			case err != nil:
				return nil, ZeroStats{}, fmt.Errorf("zero scan %s: seek data: %w", path, err)
			}
			if d > size {
				d = size
			}
			if seekable {
				e := size
				if d < size {
					e, err = unix.Seek(fd, d, unix.SEEK_HOLE)
					if errors.Is(err, unix.ENXIO) {
						e = size
					} else if err != nil {
						return nil, ZeroStats{}, fmt.Errorf("zero scan %s: seek hole: %w", path, err)
					}
				}
				// Widen to whole pages: a page partly in a hole is read.
				dataStart = max(off, d/ps*ps)
				dataEnd = min(size, (e+ps-1)/ps*ps)
				if d >= size || dataEnd <= dataStart {
					dataStart, dataEnd = size, size
				}
			}
		}
		if dataStart > off {
			stats.HolePages += PagesOf(dataStart) - uint64(off)/PageSize
			hashZeros(dataStart - off)
		}
		for p := dataStart; p < dataEnd; {
			want := min(int64(len(buf)), dataEnd-p)
			n, err := f.ReadAt(buf[:want], p)
			if int64(n) != want {
				return nil, ZeroStats{}, fmt.Errorf("zero scan %s: short read at %d (file changed?): %v", path, p+int64(n), err)
			}
			stats.ReadBytes += want
			chunk := buf[:want]
			if h != nil {
				h.Write(chunk)
			}
			first := uint64(p) / PageSize
			for i := 0; i < len(chunk); i += snapshotPageSize {
				page := chunk[i:min(i+snapshotPageSize, len(chunk))]
				if bytes.Equal(page, zeroPage[:len(page)]) {
					continue
				}
				pg := first + uint64(i)/PageSize
				if n := len(nonzero); n > 0 && nonzero[n-1].End() == pg {
					nonzero[n-1].Pages++
				} else {
					nonzero = append(nonzero, PageRun{Start: pg, Pages: 1})
				}
			}
			p += want
		}
		off = dataEnd
	}
	stats.NonzeroPages = CountPages(nonzero)
	stats.ZeroPages = stats.Pages - stats.NonzeroPages
	stats.Regions = len(nonzero)
	return nonzero, stats, nil
}

const snapshotPageSize = int(PageSize)
