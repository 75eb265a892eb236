package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/metrics"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// openStore opens the snapshot memory store (premap). A store that cannot
// be opened leaves the daemon running without one; premap then falls back
// to vanilla and /v1/store says why.
func (s *Service) openStore(ctx context.Context) {
	var st *store.Store
	var err error
	switch {
	case s.cfg.StoreDeviceFile != "":
		st, err = store.OpenDeviceFile(s.cfg.StoreDeviceFile, store.DeviceFileAlign)
	case s.cfg.StoreDir != "":
		st, err = store.Open(s.cfg.StoreDir)
	default:
		err = errors.New("no memory store directory is configured (thawd --store-dir)")
	}
	if err != nil {
		s.storeErr = err
		s.log.Warn("snapshot memory store unavailable; premap restores will run as vanilla", "dir", s.cfg.StoreDir, "region", s.cfg.StoreDeviceFile, "err", err)
		return
	}
	s.store = st
	s.log.Info("snapshot memory store", "dir", st.Dir(), "kind", st.Kind())
	if n := st.Notice(); n != "" {
		s.log.Warn("snapshot memory store", "dir", st.Dir(), "notice", n)
	}
	// The store belongs to this catalog: drop copies of snapshots it does
	// not have (deleted while the daemon was down).
	in, err := st.Info()
	if err != nil {
		return
	}
	for _, e := range in.Entries {
		if _, err := s.db.GetSnapshot(ctx, e.Snapshot); errors.Is(err, catalog.ErrNotFound) {
			if err := st.Remove(e.Snapshot); err == nil {
				s.log.Warn("removed store copy of an unknown snapshot", "snapshot", e.Snapshot)
			}
		}
	}
}

// StoreInfo describes the snapshot memory store.
type StoreInfo = wire.StoreInfo

// StoreInfo reports the store's tier, capacity, use and entries.
func (s *Service) StoreInfo(context.Context) (*StoreInfo, error) {
	if s.store == nil {
		return &StoreInfo{Error: s.storeErr.Error(), Entries: []store.Entry{}}, nil
	}
	in, err := s.store.Info()
	if err != nil {
		return nil, err
	}
	return &StoreInfo{Available: true, Dir: in.Dir, Kind: string(in.Kind), PageSize: in.PageSize, CapacityBytes: in.CapacityBytes,
		FreeBytes: in.FreeBytes, UsedBytes: in.UsedBytes, ReservedBytes: in.ReservedBytes, Clones: in.Clones, Entries: in.Entries}, nil
}

// StoreSnapshot places a verified copy of a snapshot's memory file in the
// store, where premap restores map it from.
func (s *Service) StoreSnapshot(ctx context.Context, id string) (*store.Entry, error) {
	if s.store == nil {
		return nil, fmt.Errorf("%w: %v", ErrConflict, s.storeErr)
	}
	phase(ctx, "verifying")
	v, err := s.verified(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if v.sn.RemoteMemory { // a lazy snapshot: its memory pulled first
		phase(ctx, "pulling")
		if v.sn, err = s.reg.CompleteSnapshot(ctx, id); err != nil {
			return nil, err
		}
	}
	s.dropSnapshotStandby(id, usesStore, whyStandbyStore)
	phase(ctx, "copying to the store")
	e, err := s.store.Put(id, filepath.Join(v.sn.Dir, snapshot.MemoryFile), v.m.Files[snapshot.MemoryFile])
	if errors.Is(err, store.ErrFull) {
		return nil, fmt.Errorf("%w: %v", ErrNoSpace, err)
	}
	if err != nil {
		return nil, err
	}
	s.log.Info("snapshot stored", "snapshot", id, "store_bytes", e.Bytes, "regions", e.Regions, "ms", e.StoredMS)
	return e, nil
}

// UnstoreSnapshot removes a snapshot's copy from the store. VMs restored
// from it keep their mappings until they exit.
func (s *Service) UnstoreSnapshot(ctx context.Context, id string) error {
	if _, err := s.GetSnapshot(ctx, id); err != nil {
		return err
	}
	if s.store == nil {
		return nil
	}
	s.dropSnapshotStandby(id, usesStore, whyStandbyStore)
	return s.store.Remove(id)
}

// SnapshotMemory is the host memory a snapshot's files hold.
type SnapshotMemory = wire.SnapshotMemory

// SnapshotMemory measures it now (mincore over each file).
func (s *Service) SnapshotMemory(ctx context.Context, id string) (*SnapshotMemory, error) {
	sn, err := s.GetSnapshot(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &SnapshotMemory{Snapshot: id, Files: map[string]int64{}}
	err = filepath.WalkDir(sn.Dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		res, _, err := pagecache.Resident(p)
		if err != nil {
			return nil // a file removed under us holds nothing
		}
		rel, _ := filepath.Rel(sn.Dir, p)
		b := int64(res) * int64(os.Getpagesize())
		out.Files[rel] = b
		out.PageCacheBytes += b
		return nil
	})
	if err != nil {
		return nil, err
	}
	if s.store != nil {
		if e, err := s.store.Get(id); err == nil {
			out.StoreBytes = e.Bytes
		}
	}
	return out, nil
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
	lv, ok := s.live(id)
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
