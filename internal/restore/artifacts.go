package restore

import (
	"sync"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// verifiedStamps remembers artifact data files that were fully verified in
// this process, by their stamp (inode, size, mtime, ctime). A data file of
// tens of MB is hashed once, not on every restore; any change to it changes
// its stamp and forces a full check again, as for snapshot memory files.
var verifiedStamps sync.Map // path -> snapshot.Stamp

// verifyArtifact runs check(full) with full=true unless path's stamp was
// verified before, and then records it.
func verifyArtifact(path string, check func(full bool) error) error {
	st, err := snapshot.StampOf(path)
	if err != nil {
		return err
	}
	prev, ok := verifiedStamps.Load(path)
	full := !ok || prev.(snapshot.Stamp) != st
	if err := check(full); err != nil {
		verifiedStamps.Delete(path)
		return err
	}
	if full {
		verifiedStamps.Store(path, st)
	}
	return nil
}

// TrustArtifact records that path was just verified (the daemon verifies
// artifacts fully right after building them).
func TrustArtifact(path string) error {
	st, err := snapshot.StampOf(path)
	if err != nil {
		return err
	}
	verifiedStamps.Store(path, st)
	return nil
}
