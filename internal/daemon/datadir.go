package daemon

import (
	"context"
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

// errDataDirInUse: another daemon holds the data directory.
var errDataDirInUse = errors.New("data directory in use")

// lockDataDir takes the data directory for this daemon, or says who has it.
// The lock goes with the process, so a daemon that crashed never blocks the
// next one.
func lockDataDir(dir string) (*os.File, error) {
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
			return nil, fmt.Errorf("%w: %s is used by another thawd (pid %s); stop it or choose another --data-dir", errDataDirInUse, dir, holder)
		}
		return nil, fmt.Errorf("data dir lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// removeLeftovers deletes what a crash left in the data directory:
// half-built functions and snapshots, and directories of functions and
// snapshots the catalog does not know (a crash between publishing one and
// recording it).
func (s *Service) removeLeftovers(ctx context.Context) error {
	known, err := s.versions.CodeDirsInUse(ctx)
	if err != nil {
		return err
	}
	snaps, err := s.db.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		known[sn.Dir] = true
	}
	for _, parent := range []string{s.functionsDir(), s.snapshotsDir()} {
		ents, err := os.ReadDir(parent)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(parent, e.Name())
			if known[p] {
				continue
			}
			what := "unrecorded"
			if strings.HasPrefix(e.Name(), ".tmp-") {
				what = "incomplete"
			}
			if err := os.RemoveAll(p); err != nil {
				s.log.Error("remove leftover", "path", p, "err", err)
				continue
			}
			s.log.Warn("removed "+what+" leftover of an earlier daemon", "path", p)
		}
	}
	return nil
}
