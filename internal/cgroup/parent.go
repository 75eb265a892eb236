package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotCgroup: a path given to RemoveParent is not a thaw parent group.
var ErrNotCgroup = errors.New("not a thaw cgroup parent")

// Parents lists the parent group's directories, once each (one per v1
// hierarchy, one on v2).
func (m *Manager) Parents() []string {
	seen := map[string]bool{}
	var out []string
	for _, dir := range m.dirs {
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	sort.Strings(out)
	return out
}

// Close removes the parent group, with any empty group left below it, in
// every hierarchy. A group that still holds processes is never removed
// (the kernel refuses): its parent stays, and the error says so.
func (m *Manager) Close() error {
	var errs []error
	for _, dir := range m.Parents() {
		if err := removeParent(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// RemoveParent removes the parent group at dir, named name, that an
// earlier daemon left: its empty child groups, then itself. dir must be
// an absolute path on a cgroup file system whose last element is name;
// anything else is refused. A missing dir is not an error.
func RemoveParent(dir, name string) error {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || filepath.Base(dir) != name {
		return fmt.Errorf("%w: %q (want a clean absolute path ending in %s)", ErrNotCgroup, dir, name)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); errors.Is(err, unix.ENOENT) {
		return nil
	} else if err != nil {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if st.Type != unix.CGROUP_SUPER_MAGIC && st.Type != unix.CGROUP2_SUPER_MAGIC {
		return fmt.Errorf("%w: %s is not on a cgroup file system", ErrNotCgroup, dir)
	}
	return removeParent(dir)
}

// removeParent removes dir's child groups (empty ones only: rmdir refuses
// the others), then dir.
func removeParent(dir string) error {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var errs []error
	for _, e := range ents {
		if e.IsDir() {
			if err := rmdirGroup(filepath.Join(dir, e.Name())); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := rmdirGroup(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// rmdirGroup removes one group, waiting a little while the kernel still
// holds a reference of an exited process (EBUSY).
func rmdirGroup(dir string) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = syscall.Rmdir(dir); err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("remove cgroup %s: %w", dir, err)
}
