package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Readahead is the read_ahead_kb setting of the block device holding a
// directory. Host readahead decides how much every page fault on a memory
// file reads (mmap read-around reads read_ahead_kb around the fault), so
// results are only comparable at the same setting; benchmarks record it and
// can set it for the run and put it back afterwards.
type Readahead struct {
	path string // .../queue/read_ahead_kb
	orig int
}

// ReadaheadOf finds the queue/read_ahead_kb file for dir's device.
func ReadaheadOf(dir string) (*Readahead, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return nil, err
	}
	dev := fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev))
	real, err := filepath.EvalSymlinks(dev)
	if err != nil {
		return nil, fmt.Errorf("block device of %s: %w", dir, err)
	}
	for _, d := range []string{real, filepath.Dir(real)} { // a partition's queue is its disk's
		p := filepath.Join(d, "queue", "read_ahead_kb")
		if b, err := os.ReadFile(p); err == nil {
			kb, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				return nil, err
			}
			return &Readahead{path: p, orig: kb}, nil
		}
	}
	return nil, fmt.Errorf("no read_ahead_kb for the device of %s", dir)
}

// KB is the setting found.
func (r *Readahead) KB() int { return r.orig }

// Set changes it.
func (r *Readahead) Set(kb int) error {
	return os.WriteFile(r.path, []byte(strconv.Itoa(kb)), 0o644)
}

// Restore puts the original value back.
func (r *Readahead) Restore() error { return r.Set(r.orig) }
