package snapshot

import "sync"

// verifiedStamps remembers data files (strategy artifacts, memory store
// copies) that were fully verified in this process, by their stamp (inode,
// size, mtime, ctime). A file of tens of MB is hashed once, not on every
// restore; any change to it changes its stamp and forces a full check
// again, as for snapshot memory files.
var verifiedStamps sync.Map // path -> Stamp

// VerifyOnce runs check(full) with full=true unless path's stamp was
// verified before in this process, and then records it.
func VerifyOnce(path string, check func(full bool) error) error {
	st, err := StampOf(path)
	if err != nil {
		return err
	}
	prev, ok := verifiedStamps.Load(path)
	full := !ok || prev.(Stamp) != st
	if err := check(full); err != nil {
		verifiedStamps.Delete(path)
		return err
	}
	if full {
		verifiedStamps.Store(path, st)
	}
	return nil
}

// Trust records that path was just verified (the daemon verifies what it
// builds or copies right after writing it).
func Trust(path string) error {
	st, err := StampOf(path)
	if err != nil {
		return err
	}
	verifiedStamps.Store(path, st)
	return nil
}
