// Package pagecache evicts, fills and measures one file's pages in the host
// page cache. "Cold" measurements evict exactly the files of the snapshot
// under test (posix_fadvise DONTNEED), never the whole system's cache.
package pagecache

import (
	"errors"
	"fmt"
	"io"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Evict drops path's clean pages from the page cache. Dirty pages are
// written back first so they can be dropped too.
func Evict(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("evict %s: fdatasync: %w", path, err)
	}
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("evict %s: %w", path, err)
	}
	return nil
}

// EvictAll evicts every existing path; missing files are skipped.
func EvictAll(paths ...string) error {
	var errs []error
	for _, p := range paths {
		if err := Evict(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Fill reads path sequentially so all of it is in the page cache, skipping
// holes (they have no pages to cache). It returns the bytes read.
func Fill(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_SEQUENTIAL)
	buf := make([]byte, 4<<20)
	var total int64
	err = snapshot.DataExtents(f, st.Size(), func(data, hole int64) error {
		for off := data; off < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-off)], off)
			total += int64(n)
			off += int64(n)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if n == 0 {
				break
			}
		}
		return nil
	})
	return total, err
}

// Resident returns how many of path's pages are in the page cache, and its
// page count.
func Resident(path string) (resident, pages int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() == 0 {
		return 0, 0, err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return 0, 0, err
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+4095)/4096)
	if err := Mincore(m, vec); err != nil {
		return 0, 0, err
	}
	for _, b := range vec {
		resident += int(b & 1)
	}
	return resident, len(vec), nil
}

// Mincore fills vec (one byte per page of b; bit 0 set if resident) like
// mincore(2). golang.org/x/sys/unix has no wrapper for it on Linux.
func Mincore(b []byte, vec []byte) error {
	if len(b) == 0 {
		return nil
	}
	if len(vec) < (len(b)+4095)/4096 {
		return fmt.Errorf("mincore: vec holds %d pages, need %d", len(vec), (len(b)+4095)/4096)
	}
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return errno
	}
	return nil
}
