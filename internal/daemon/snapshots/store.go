package snapshots

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/progress"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// OpenStore opens the snapshot memory store (premap). A store that cannot
// be opened leaves the daemon running without one; premap then falls back
// to vanilla and StoreInfo says why.
func (m *Manager) OpenStore(ctx context.Context) {
	var st *store.Store
	var err error
	switch {
	case m.cfg.StoreDeviceFile != "":
		st, err = store.OpenDeviceFile(m.cfg.StoreDeviceFile, store.DeviceFileAlign)
	case m.cfg.StoreDir != "":
		st, err = store.Open(m.cfg.StoreDir)
	default:
		err = errors.New("no memory store directory is configured (thawd --store-dir)")
	}
	m.mu.Lock()
	m.store, m.storeErr = st, err
	m.mu.Unlock()
	if err != nil {
		m.log.Warn("snapshot memory store unavailable; premap restores will run as vanilla", "dir", m.cfg.StoreDir, "region", m.cfg.StoreDeviceFile, "err", err)
		return
	}
	m.log.Info("snapshot memory store", "dir", st.Dir(), "kind", st.Kind())
	if n := st.Notice(); n != "" {
		m.log.Warn("snapshot memory store", "dir", st.Dir(), "notice", n)
	}
	// The store belongs to this catalog: drop copies of snapshots it does
	// not have (deleted while the daemon was down).
	in, err := st.Info()
	if err != nil {
		return
	}
	for _, e := range in.Entries {
		if _, err := m.d.Catalog.GetSnapshot(ctx, e.Snapshot); errors.Is(err, catalog.ErrNotFound) {
			if err := st.Remove(e.Snapshot); err == nil {
				m.log.Warn("removed store copy of an unknown snapshot", "snapshot", e.Snapshot)
			}
		}
	}
}

// Store is the memory store, nil if it is unavailable (NeedStore says why).
func (m *Manager) Store() *store.Store {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.store
}

// NeedStore is nil with a memory store, else ErrConflict saying why there
// is none.
func (m *Manager) NeedStore() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.store == nil {
		return fmt.Errorf("%w: %v", errdefs.ErrConflict, m.storeErr)
	}
	return nil
}

// CloseStore closes the memory store, if it is open.
func (m *Manager) CloseStore() error {
	if st := m.Store(); st != nil {
		return st.Close()
	}
	return nil
}

// StoreInfo reports the store's tier, capacity, use and entries.
func (m *Manager) StoreInfo(context.Context) (*wire.StoreInfo, error) {
	m.mu.Lock()
	st, why := m.store, m.storeErr
	m.mu.Unlock()
	if st == nil {
		return &wire.StoreInfo{Error: why.Error(), Entries: []store.Entry{}}, nil
	}
	in, err := st.Info()
	if err != nil {
		return nil, err
	}
	return &wire.StoreInfo{Available: true, Dir: in.Dir, Kind: string(in.Kind), PageSize: in.PageSize, CapacityBytes: in.CapacityBytes,
		FreeBytes: in.FreeBytes, UsedBytes: in.UsedBytes, ReservedBytes: in.ReservedBytes, Clones: in.Clones, Entries: in.Entries}, nil
}

// Put places a verified copy of a snapshot's memory file in the store,
// where premap restores map it from.
func (m *Manager) Put(ctx context.Context, id string) (*store.Entry, error) {
	if err := m.NeedStore(); err != nil {
		return nil, err
	}
	st := m.Store()
	progress.Phase(ctx, "verifying")
	v, err := m.Verified(ctx, id, false)
	if err != nil {
		return nil, err
	}
	if v.Sn.RemoteMemory { // a lazy snapshot: its memory pulled first
		progress.Phase(ctx, "pulling")
		if v.Sn, err = m.d.Registry.Complete(ctx, id); err != nil {
			return nil, err
		}
	}
	m.d.VMs.DropStoreStandbys(id)
	progress.Phase(ctx, "copying to the store")
	e, err := st.Put(id, filepath.Join(v.Sn.Dir, snapshot.MemoryFile), v.M.Files[snapshot.MemoryFile])
	if errors.Is(err, store.ErrFull) {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrNoSpace, err)
	}
	if err != nil {
		return nil, err
	}
	m.log.Info("snapshot stored", "snapshot", id, "store_bytes", e.Bytes, "regions", e.Regions, "ms", e.StoredMS)
	return e, nil
}

// Unstore removes a snapshot's copy from the store. VMs restored from it
// keep their mappings until they exit.
func (m *Manager) Unstore(ctx context.Context, id string) error {
	if _, err := m.Get(ctx, id); err != nil {
		return err
	}
	st := m.Store()
	if st == nil {
		return nil
	}
	m.d.VMs.DropStoreStandbys(id)
	return st.Remove(id)
}

// Memory measures the host memory a snapshot's files hold now (mincore
// over each file) and its store copy's size.
func (m *Manager) Memory(ctx context.Context, id string) (*wire.SnapshotMemory, error) {
	sn, err := m.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	out := &wire.SnapshotMemory{Snapshot: id, Files: map[string]int64{}}
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
	if st := m.Store(); st != nil {
		if e, err := st.Get(id); err == nil {
			out.StoreBytes = e.Bytes
		}
	}
	return out, nil
}

// AdoptStoreLeftovers removes the default memory store under dataDir that
// a daemon that died there left, when this one no longer uses it.
func (m *Manager) AdoptStoreLeftovers(dataDir string) {
	if m.cfg.StoreDeviceFile != "" || absPath(m.cfg.StoreDir) != store.DefaultDirFor(dataDir) {
		if err := store.RemoveUnusedDefault(dataDir); err != nil {
			m.log.Warn("memory store an earlier daemon left", "err", err)
		}
	}
}

// ReleaseStore removes the memory store's directory at exit when it holds
// no copy.
func (m *Manager) ReleaseStore() {
	if st := m.Store(); st != nil {
		if gone, err := st.RemoveIfEmpty(); err != nil {
			m.log.Warn("remove memory store directory", "err", err)
		} else if !gone {
			m.log.Info("memory store kept for the next daemon", "dir", st.Dir())
		}
	}
}

func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
