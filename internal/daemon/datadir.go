package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/thaw-dev/thaw/internal/datadir"
)

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

// LockFile in the data directory is held (flock) by the daemon using it.
const LockFile = datadir.LockFile
