// Package pagemap reads which pages of another process's address range
// are mapped (/proc/PID/pagemap) or were referenced since a point in time
// (/proc/PID/clear_refs, then smaps' Referenced), and where that process
// mapped a file (/proc/PID/maps). The restore strategies use it to compare
// what a restored guest touched with the set they recorded.
package pagemap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// PageSize is the host's page size the kernel reports pagemap in.
const PageSize = 4096

// ErrNotMapped: the process has no mapping of the file.
var ErrNotMapped = errors.New("file not mapped by the process")

// Present reports, for each of pages pages from start, whether the
// process's page table maps it (or it is swapped out): bit i of the result
// is page i.
func Present(pid int, start uintptr, pages int) ([]uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]uint64, (pages+63)/64)
	const batch = 1 << 15 // entries per read (256 KiB)
	buf := make([]byte, 8*batch)
	for i := 0; i < pages; i += batch {
		n := min(batch, pages-i)
		off := int64(start/PageSize+uintptr(i)) * 8
		if _, err := f.ReadAt(buf[:8*n], off); err != nil {
			return nil, fmt.Errorf("pagemap of %d: %w", pid, err)
		}
		for j := 0; j < n; j++ {
			e := binary.LittleEndian.Uint64(buf[8*j:])
			if e&(1<<63|1<<62) != 0 { // present or swapped
				k := i + j
				out[k/64] |= 1 << (k % 64)
			}
		}
	}
	return out, nil
}

// Has says whether bit i of a Present result is set.
func Has(bits []uint64, i uint64) bool {
	return i/64 < uint64(len(bits)) && bits[i/64]&(1<<(i%64)) != 0
}

// FileBase is the address at which the process would see byte 0 of path
// mapped: start minus file offset of any of its mappings of path (every
// mapping of guest memory shares it). ErrNotMapped if there is none.
func FileBase(pid int, path string) (uintptr, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		start, _, off, p, ok := parseMapsLine(sc.Text())
		if ok && p == real {
			return start - uintptr(off), nil
		}
	}
	return 0, fmt.Errorf("%s in process %d: %w", path, pid, ErrNotMapped)
}

// parseMapsLine parses "start-end perms offset dev inode path".
func parseMapsLine(line string) (start, end uintptr, off uint64, path string, ok bool) {
	f := strings.Fields(line)
	if len(f) < 6 {
		return 0, 0, 0, "", false
	}
	lo, hi, found := strings.Cut(f[0], "-")
	s, err1 := strconv.ParseUint(lo, 16, 64)
	e, err2 := strconv.ParseUint(hi, 16, 64)
	o, err3 := strconv.ParseUint(f[2], 16, 64)
	if !found || err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, 0, "", false
	}
	return uintptr(s), uintptr(e), o, afterFields(line, 5), true
}

// afterFields is what follows the first n space-separated fields of line
// (a path may hold spaces).
func afterFields(line string, n int) string {
	rest := line
	for i := 0; i < n; i++ {
		rest = strings.TrimLeft(rest, " \t")
		k := strings.IndexAny(rest, " \t")
		if k < 0 {
			return ""
		}
		rest = rest[k:]
	}
	return strings.TrimSpace(rest)
}

// ClearReferenced clears the referenced (accessed) bits of every page the
// process maps, so Referenced later counts what it touched since.
func ClearReferenced(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("1"), 0)
}

// Referenced is the bytes of [start, end) the process referenced since its
// last ClearReferenced (smaps' Referenced, summed over the mappings that
// lie in the range).
func Referenced(pid int, start, end uintptr) (uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var total uint64
	in := false
	for sc.Scan() {
		line := sc.Text()
		if s, e, _, _, ok := parseMapsLine(line); ok || isRangeLine(line) {
			if !ok { // an anonymous mapping: no path field
				s, e = rangeOf(line)
			}
			in = s >= start && e <= end && e > s
			continue
		}
		if in && strings.HasPrefix(line, "Referenced:") {
			kb, err := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, "Referenced:"), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("smaps of %d: %q: %w", pid, line, err)
			}
			total += kb * 1024
		}
	}
	return total, sc.Err()
}

// isRangeLine says whether an smaps line opens a mapping ("start-end perms
// offset dev inode" with or without a path).
func isRangeLine(line string) bool {
	f := strings.Fields(line)
	return len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":")
}

func rangeOf(line string) (uintptr, uintptr) {
	lo, hi, _ := strings.Cut(strings.Fields(line)[0], "-")
	s, _ := strconv.ParseUint(lo, 16, 64)
	e, _ := strconv.ParseUint(hi, 16, 64)
	return uintptr(s), uintptr(e)
}

// Mapping is one mapping of a file in a process.
type Mapping struct {
	Start, End uintptr
	Off        uint64 // file offset of Start
}

// Mappings lists the process's mappings of path.
func Mappings(pid int, path string) ([]Mapping, error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	var out []Mapping
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if s, e, off, p, ok := parseMapsLine(sc.Text()); ok && p == real {
			out = append(out, Mapping{Start: s, End: e, Off: off})
		}
	}
	return out, sc.Err()
}
