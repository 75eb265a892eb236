package daemon

import (
	"context"
	"fmt"

	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// The snapshot memory store (premap) is the snapshots component's
// (package daemon/snapshots); the service forwards its API.

// StoreInfo describes the snapshot memory store.
type StoreInfo = wire.StoreInfo

// StoreInfo reports the store's tier, capacity, use and entries.
func (s *Service) StoreInfo(ctx context.Context) (*StoreInfo, error) { return s.snaps.StoreInfo(ctx) }

// StoreSnapshot places a verified copy of a snapshot's memory file in the
// store, where premap restores map it from.
func (s *Service) StoreSnapshot(ctx context.Context, id string) (*store.Entry, error) {
	return s.snaps.Put(ctx, id)
}

// UnstoreSnapshot removes a snapshot's copy from the store. VMs restored
// from it keep their mappings until they exit.
func (s *Service) UnstoreSnapshot(ctx context.Context, id string) error {
	return s.snaps.Unstore(ctx, id)
}

// SnapshotMemory is the host memory a snapshot's files hold.
type SnapshotMemory = wire.SnapshotMemory

// SnapshotMemory measures it now (mincore over each file).
func (s *Service) SnapshotMemory(ctx context.Context, id string) (*SnapshotMemory, error) {
	return s.snaps.Memory(ctx, id)
}

// VMMemory is a live VM's process memory: what it holds privately
// (anonymous: guest pages it wrote or that were copied into it, plus QEMU's
// own heap) and what it maps from files and shared memory (counted here but
// shared with other VMs; PSS divides shared pages among their users).
type VMMemory = wire.VMMemory

// VMMemory measures a running VM now.
func (s *Service) VMMemory(ctx context.Context, id string) (*VMMemory, error) {
	if _, err := s.GetVM(ctx, id); err != nil {
		return nil, err
	}
	lv, ok := s.vms.Live(id)
	if !ok || lv.M == nil {
		return nil, fmt.Errorf("%w: vm %s is not running", ErrConflict, id)
	}
	m, err := procstat.ReadMemory(lv.M.PID())
	if err != nil {
		return nil, fmt.Errorf("%w: vm %s: %v", ErrConflict, id, err)
	}
	return &VMMemory{VM: id, ProcessMemory: m}, nil
}

// Metrics are the daemon's Prometheus metrics.
func (s *Service) Metrics() *metrics.Set { return s.metrics }

// metricState is what a scrape reads: VMs by state, the store.
func (s *Service) metricState() metrics.State {
	st := metrics.State{VMs: map[string]int{}, IdleVMs: s.pool.Idle(), StandbyVMs: s.vmmPool.Count()}
	ctx := context.Background()
	if vms, err := s.db.ListVMs(ctx); err == nil {
		for _, v := range vms {
			st.VMs[v.State]++
		}
	}
	st.Store, _ = s.StoreInfo(ctx)
	if s.reg.ChunkCache() != nil {
		c := s.reg.ChunkCache().Stats()
		st.Chunks = &metrics.ChunkCache{FetchedBytes: c.FetchedBytes, FetchedChunks: c.FetchedChunks, Hits: c.Hits,
			UsedBytes: c.UsedBytes, BudgetBytes: c.BudgetBytes}
	}
	return st
}

// usesStore says whether sb's strategy maps the snapshot's store copy (a
// standby of it goes when the copy does).
func usesStore(sb *standby) bool {
	st, ok := restore.Lookup(sb.Key.Kind)
	return ok && st.UsesStore
}
