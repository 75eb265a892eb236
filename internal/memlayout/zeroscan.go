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
	sc := &scanner{f: f, path: path, h: h, size: st.Size(), seekable: true, buf: make([]byte, scanChunk)}
	sc.stats = ZeroStats{Size: sc.size, Pages: PagesOf(sc.size)}
	for off := int64(0); off < sc.size; { // off is page-aligned
		dataStart, dataEnd, err := sc.nextData(off)
		if err != nil {
			return nil, ZeroStats{}, err
		}
		if dataStart > off {
			sc.stats.HolePages += PagesOf(dataStart) - uint64(off)/PageSize
			sc.hashZeros(dataStart - off)
		}
		if err := sc.readData(dataStart, dataEnd); err != nil {
			return nil, ZeroStats{}, err
		}
		off = dataEnd
	}
	sc.stats.NonzeroPages = CountPages(sc.nonzero)
	sc.stats.ZeroPages = sc.stats.Pages - sc.stats.NonzeroPages
	sc.stats.Regions = len(sc.nonzero)
	return sc.nonzero, sc.stats, nil
}

// scanner is one zero scan in progress.
type scanner struct {
	f        *os.File
	path     string
	h        hash.Hash // nil: no digest
	size     int64
	seekable bool // the file system reports holes (SEEK_DATA/SEEK_HOLE)
	buf      []byte
	nonzero  []PageRun
	stats    ZeroStats
}

// nextData finds the next data extent at or after off, widened to whole
// pages (a page partly in a hole is read); without hole support the rest
// of the file is data.
func (sc *scanner) nextData(off int64) (start, end int64, err error) {
	if !sc.seekable {
		return off, sc.size, nil
	}
	fd := int(sc.f.Fd())
	d, err := unix.Seek(fd, off, unix.SEEK_DATA)
	switch {
	case errors.Is(err, unix.ENXIO): // only a hole remains
		d = sc.size
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP):
		sc.seekable = false // no hole support: all data
		return off, sc.size, nil
	case err != nil:
		return 0, 0, fmt.Errorf("zero scan %s: seek data: %w", sc.path, err)
	}
	d = min(d, sc.size)
	e := sc.size
	if d < sc.size {
		e, err = unix.Seek(fd, d, unix.SEEK_HOLE)
		if errors.Is(err, unix.ENXIO) {
			e = sc.size
		} else if err != nil {
			return 0, 0, fmt.Errorf("zero scan %s: seek hole: %w", sc.path, err)
		}
	}
	ps := int64(PageSize)
	start, end = max(off, d/ps*ps), min(sc.size, (e+ps-1)/ps*ps)
	if d >= sc.size || end <= start {
		return sc.size, sc.size, nil
	}
	return start, end, nil
}

// hashZeros feeds n zero bytes (a hole) to the digest.
func (sc *scanner) hashZeros(n int64) {
	if sc.h == nil {
		return
	}
	for n > 0 {
		k := min(n, int64(len(zeroChunk)))
		sc.h.Write(zeroChunk[:k])
		n -= k
	}
}

// readData reads [start, end), hashing it and noting its non-zero pages.
func (sc *scanner) readData(start, end int64) error {
	for p := start; p < end; {
		want := min(int64(len(sc.buf)), end-p)
		n, err := sc.f.ReadAt(sc.buf[:want], p)
		if int64(n) != want {
			return fmt.Errorf("zero scan %s: short read at %d (file changed?): %v", sc.path, p+int64(n), err)
		}
		sc.stats.ReadBytes += want
		chunk := sc.buf[:want]
		if sc.h != nil {
			sc.h.Write(chunk)
		}
		first := uint64(p) / PageSize
		for i := 0; i < len(chunk); i += snapshotPageSize {
			page := chunk[i:min(i+snapshotPageSize, len(chunk))]
			if bytes.Equal(page, zeroPage[:len(page)]) {
				continue
			}
			pg := first + uint64(i)/PageSize
			if n := len(sc.nonzero); n > 0 && sc.nonzero[n-1].End() == pg {
				sc.nonzero[n-1].Pages++
			} else {
				sc.nonzero = append(sc.nonzero, PageRun{Start: pg, Pages: 1})
			}
		}
		p += want
	}
	return nil
}

const snapshotPageSize = int(PageSize)
