// Package datadir is the lock a daemon holds on its data directory: one
// daemon a directory, and the next one is told who has it.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// LockFile in the data directory is held (flock) by the daemon using it.
const LockFile = "thawd.lock"

// ErrInUse: another daemon holds the data directory.
var ErrInUse = errors.New("data directory in use")

// Lock takes the data directory dir for this daemon, or says who has it.
// The lock goes with the process, so a daemon that crashed never blocks the
// next one.
func Lock(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	path := filepath.Join(dir, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data dir lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		holder := strings.TrimSpace(string(b[:n]))
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is used by another thawd (pid %s); stop it or choose another --data-dir", ErrInUse, dir, holder)
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
