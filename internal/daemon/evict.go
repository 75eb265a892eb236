package daemon

import (
	"context"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
)

// EvictSnapshot drops a snapshot's files and its strategies' artifacts from
// the host page cache, so the next restores read them from disk
// (benchmarks' cold measurements; a burst evicts once for all of its
// restores).
func (s *Service) EvictSnapshot(ctx context.Context, id string) error {
	sn, err := s.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	return s.evictSnapshot(ctx, sn)
}

// evictSnapshot drops sn's standby VMs, which map its memory (and hold
// what their strategy read ahead): a cold start after an eviction must
// not find them; then its files (snapshots.Evict).
func (s *Service) evictSnapshot(ctx context.Context, sn *catalog.Snapshot) error {
	s.dropSnapshotStandby(sn.ID, nil, whyStandbyEvict)
	return snapshots.Evict(sn)
}
