package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// The hugetlbfs tier. A hugetlbfs file is allocated in huge pages, has no
// write(2) and no SEEK_DATA, so Put fallocates each huge page that holds a
// non-zero byte, copies it in through a shared mapping, and records the
// data regions in the entry. A restore maps those regions from the copy in
// huge-page units (QEMU aligns the RAM block to the huge page size because
// its backing file is on hugetlbfs) and the rest anonymous.
//
// The cost, measured by `thaw bench memory`: a guest write into a mapped
// huge page copies the whole huge page into the clone (copy-on-write is per
// mapped page), and each clone's private mapping reserves huge pages for
// its copy-on-writes when QEMU maps it, so the pool must hold the copy
// plus one copy's worth per live clone.

// pool is a huge page pool (/sys/kernel/mm/hugepages/hugepages-<size>kB).
type pool struct {
	total, free, reserved, surplus int64 // pages
}

// available is the number of pages a new allocation or reservation can
// take: free pages not promised to an existing reservation.
func (p pool) available() int64 { return max(p.free-p.reserved, 0) }

// poolDir is where the kernel publishes pools; a variable for tests.
var poolDir = "/sys/kernel/mm/hugepages"

func readPool(pageSize int64) (pool, error) {
	dir := filepath.Join(poolDir, fmt.Sprintf("hugepages-%dkB", pageSize>>10))
	var p pool
	for name, dst := range map[string]*int64{"nr_hugepages": &p.total, "free_hugepages": &p.free,
		"resv_hugepages": &p.reserved, "surplus_hugepages": &p.surplus} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return p, fmt.Errorf("huge page pool: %w", err)
		}
		if *dst, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return p, fmt.Errorf("huge page pool: %s: %w", name, err)
		}
	}
	return p, nil
}

// put stores memPath on hugetlbfs: one pass over the source hashes every
// byte (holes as zeros) and copies each huge page with data.
func (h *hugeTier) put(id, memPath string, want snapshot.FileInfo) (*Entry, error) {
	start := time.Now()
	src, err := openSource(id, memPath, want, h.pageSize, "huge pages")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	tmp := filepath.Join(h.dir, ".tmp-"+id+".mem")
	_ = os.Remove(tmp)
	dst, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	regions, sum, err := h.copyHuge(dst, src, want.Size)
	dst.Close()
	if err == nil && sum != want.SHA256 {
		err = fmt.Errorf("copy of %s does not match the snapshot manifest (sha256 %.12s, want %.12s)", memPath, sum, want.SHA256)
	}
	if err != nil {
		_ = os.Remove(tmp)
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.ENOMEM) {
			return nil, fmt.Errorf("%w: storing %s: the %d KiB huge page pool ran out (%v)", ErrFull, id, h.pageSize>>10, err)
		}
		return nil, fmt.Errorf("memory store: %s: %w", id, err)
	}
	e := &Entry{Snapshot: id, Size: want.Size, SHA256: sum, Regions: len(regions), PageSize: h.pageSize, Extents: regions}
	return e, h.commit(tmp, e, start)
}

// copyHuge copies every huge page of src with a non-zero byte into dst
// (fallocate first, so a short pool is ENOSPC here and never SIGBUS in a
// mapping), returning the data regions in 4 KiB pages and the SHA-256 of
// all of src.
func (h *hugeTier) copyHuge(dst, src *os.File, size int64) ([]Extent, string, error) {
	if err := dst.Truncate(size); err != nil {
		return nil, "", err
	}
	hp := h.pageSize
	return scanUnits(src, size, hp, func(off int64, unit []byte) error {
		if err := fallocate(dst, off, hp); err != nil {
			return fmt.Errorf("allocate huge page at %#x: %w", off, err)
		}
		m, err := unix.Mmap(int(dst.Fd()), off, int(hp), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("map huge page at %#x: %w", off, err)
		}
		copy(m, unit)
		return unix.Munmap(m)
	})
}

// openSource opens a snapshot memory file to store in units of n bytes,
// checking that it is the size the manifest says and a whole number of
// units.
func openSource(id, memPath string, want snapshot.FileInfo, n int64, units string) (*os.File, error) {
	if want.Size%n != 0 {
		return nil, fmt.Errorf("memory store: %s: guest memory of %d bytes is not a whole number of %d KiB %s", id, want.Size, n>>10, units)
	}
	src, err := os.Open(memPath)
	if err != nil {
		return nil, fmt.Errorf("memory store: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		src.Close()
		return nil, fmt.Errorf("memory store: %w", err)
	}
	if st.Size != want.Size {
		src.Close()
		return nil, fmt.Errorf("memory store: %s: %s is %d bytes, the snapshot manifest says %d", id, memPath, st.Size, want.Size)
	}
	return src, nil
}

// scanUnits reads the first size bytes of src in units of n bytes (holes
// are skipped, not read), hashes every byte (holes as zeros) and calls keep
// for each unit holding a non-zero byte, in order. It returns those units
// as extents (4 KiB pages, adjacent units merged) and the hex SHA-256.
func scanUnits(src *os.File, size, n int64, keep func(off int64, unit []byte) error) ([]Extent, string, error) {
	h := sha256.New()
	buf := make([]byte, n)
	zero := make([]byte, n)
	var out []Extent
	for off := int64(0); off < size; off += n {
		if !hasData(src, off, n) {
			h.Write(zero)
			continue
		}
		if _, err := src.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
			return nil, "", err
		}
		h.Write(buf)
		if bytes.Equal(buf, zero) {
			continue
		}
		if err := keep(off, buf); err != nil {
			return nil, "", err
		}
		first, pages := uint64(off)/memlayout.PageSize, uint64(n)/memlayout.PageSize
		if k := len(out); k > 0 && out[k-1].Start+out[k-1].Pages == first {
			out[k-1].Pages += pages
		} else {
			out = append(out, Extent{Start: first, Pages: pages})
		}
	}
	return out, hex.EncodeToString(h.Sum(nil)), nil
}

// hasData reports whether [off, off+n) of f holds any data extent.
func hasData(f *os.File, off, n int64) bool {
	data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
	return err == nil && data < off+n
}

// hugeTier keeps copies on hugetlbfs: only the huge pages with data,
// written through a mapping (hugetlbfs has no write(2)), their extents
// recorded (it has no SEEK_DATA), room counted in the huge page pool.
type hugeTier struct{ fileTier }

func (h *hugeTier) regions(e *Entry) ([]memlayout.PageRun, error) { return extentRuns(e), nil }

func (h *hugeTier) info(in *Info) error {
	var st unix.Statfs_t
	if err := unix.Statfs(h.dir, &st); err != nil {
		return err
	}
	p, err := readPool(h.pageSize)
	if err != nil {
		return err
	}
	in.CapacityBytes, in.FreeBytes, in.ReservedBytes = p.total*h.pageSize, p.available()*h.pageSize, p.reserved*h.pageSize
	if lim := int64(st.Blocks); lim > 0 { // a size= limit on the mount
		in.CapacityBytes = min(in.CapacityBytes, lim*h.pageSize)
		in.FreeBytes = min(in.FreeBytes, int64(st.Bavail)*h.pageSize)
	}
	return h.entries(in)
}

// mapping refuses a clone the pool cannot back: QEMU's private mapping of
// the copy reserves a huge page for every mapped huge page (for its
// copy-on-writes), and without them the mapping fails inside QEMU. Saying
// so here lets premap fall back.
func (h *hugeTier) mapping(e *Entry, _ string) (*Mapping, error) {
	in := &Info{}
	if err := h.info(in); err != nil {
		return nil, err
	}
	if in.FreeBytes < e.Bytes {
		return nil, fmt.Errorf("the huge page pool has %d MiB unreserved, a premap clone of %s reserves %d MiB for copy-on-write (raise vm.nr_hugepages)",
			in.FreeBytes>>20, e.Snapshot, e.Bytes>>20)
	}
	return fileMapping(e.Path, extentRuns(e)), nil
}

// fallocate allocates n bytes of f at off, again after a signal
// interrupted it (hugetlbfs returns EINTR when one arrives while it
// allocates, and the Go runtime's preemption sends them; what was
// allocated stays, so a retry goes on from there).
func fallocate(f *os.File, off, n int64) error {
	for {
		err := unix.Fallocate(int(f.Fd()), 0, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}
