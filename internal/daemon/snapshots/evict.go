package snapshots

import (
	"fmt"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// Evict drops a snapshot's files, and its strategies' artifacts, from the
// host page cache (posix_fadvise DONTNEED on each file; never a
// system-wide drop), so the next restore reads them from disk. The
// snapshot's standby VMs, which map its memory, are the caller's to stop
// first.
func Evict(sn *catalog.Snapshot) error {
	paths := []string{filepath.Join(sn.Dir, snapshot.MemoryFile), filepath.Join(sn.Dir, snapshot.StateFile)}
	paths = append(paths, ArtifactFiles(sn.Dir)...)
	if err := pagecache.EvictAll(paths...); err != nil {
		return fmt.Errorf("evict snapshot %s: %w", sn.ID, err)
	}
	return nil
}
