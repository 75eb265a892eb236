package store

import (
	"errors"
	"fmt"
	"path/filepath"
	"syscall"
)

// RemoveIfEmpty removes the store's directory if it holds nothing (no
// copy: copies stay, for the next daemon on the same data directory) and
// thaw made it: a default store under DefaultDir, or a directory Open
// created. A hugetlbfs store's description directory goes with it, and
// the shared DefaultDir and HugeMetaDir once empty. A device store has no
// directory. It reports whether the store's directory is gone; call it
// after Close.
func (s *Store) RemoveIfEmpty() (bool, error) {
	if s.kind == DevDAX {
		return false, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.metaDir != "" && s.metaDir != s.dir {
		_, err := rmdirIfEmpty(s.metaDir)
		errs = append(errs, err)
	}
	gone := false
	if s.created || filepath.Dir(s.dir) == DefaultDir {
		var err error
		gone, err = rmdirIfEmpty(s.dir)
		errs = append(errs, err)
	}
	for _, shared := range []string{DefaultDir, HugeMetaDir} {
		_, err := rmdirIfEmpty(shared)
		errs = append(errs, err)
	}
	return gone, errors.Join(errs...)
}

// RemoveUnusedDefault removes the default store of the data directory
// dataDir, and DefaultDir, if they are empty: what a daemon that died
// left when the next one on dataDir uses another store.
func RemoveUnusedDefault(dataDir string) error {
	_, err1 := rmdirIfEmpty(DefaultDirFor(dataDir))
	_, err2 := rmdirIfEmpty(DefaultDir)
	return errors.Join(err1, err2)
}

// rmdirIfEmpty removes dir if it is an empty directory and reports whether
// it is gone; a directory that is not empty stays without an error.
func rmdirIfEmpty(dir string) (bool, error) {
	err := syscall.Rmdir(dir)
	switch {
	case err == nil, errors.Is(err, syscall.ENOENT):
		return true, nil
	case errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.EEXIST):
		return false, nil
	default:
		return false, fmt.Errorf("memory store %s: %w", dir, err)
	}
}
