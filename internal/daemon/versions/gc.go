package versions

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry"
	ver "github.com/thaw-dev/thaw/internal/versions"
)

// CollectVersions applies version retention to a function: the snapshots
// of versions that are neither among its newest Keep nor routed to by an
// alias are deleted, here and in the registry, and the version is marked
// collected (its record stays, as history). A snapshot that is pinned or
// in use stays, and its version with it, until a later run.
func (m *Manager) CollectVersions(ctx context.Context, function string) {
	vs, err := m.db.ListVersions(ctx, function)
	if err != nil || len(vs) <= m.Keep() {
		return
	}
	aliases, err := m.db.ListAliases(ctx, function)
	if err != nil {
		return
	}
	var aliased, live []int
	for _, a := range aliases {
		if r, err := AliasRouting(a); err == nil {
			aliased = append(aliased, r.Versions()...)
		}
	}
	for _, v := range vs {
		if !v.Collected {
			live = append(live, v.Number)
		}
	}
	_, collect := ver.Retained(live, m.Keep(), aliased)
	if len(collect) == 0 {
		return
	}
	snaps, err := m.db.ListSnapshots(ctx, function)
	if err != nil {
		return
	}
	for _, n := range collect {
		if m.collectVersion(ctx, function, n, snaps) {
			m.deps.Metrics.VersionCollected()
		}
	}
	m.removeUnusedCode(ctx, function)
}

// collectVersion deletes version n's snapshots and marks it collected;
// false if one of them had to stay.
func (m *Manager) collectVersion(ctx context.Context, function string, n int, snaps []*catalog.Snapshot) bool {
	reg := m.deps.Registry
	for _, sn := range snaps {
		if sn.Version != n {
			continue
		}
		if sn.Pinned {
			return false
		}
		if err := m.deps.DeleteSnapshot(ctx, sn.ID); err != nil {
			m.log.Warn("version retention: snapshot stays for now", "function", function, "version", n, "snapshot", sn.ID, "err", err)
			return false
		}
		if reg != nil {
			if err := reg.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, registry.ErrNotFound) {
				m.log.Warn("version retention: registry copy stays", "function", function, "version", n, "snapshot", sn.ID, "err", err)
			}
		}
	}
	if reg != nil {
		if err := reg.DeleteVersion(ctx, function, n); err != nil {
			m.log.Warn("version retention: registry record stays", "function", function, "version", n, "err", err)
		}
	}
	if err := m.db.SetVersionCollected(ctx, function, n, true); err != nil {
		m.log.Error("version retention", "function", function, "version", n, "err", err)
		return false
	}
	m.log.Info("version collected", "function", function, "version", n, "keep", m.Keep())
	return true
}

// removeUnusedCode deletes the code directories of function's collected
// versions that neither the function nor a version still in use points to.
func (m *Manager) removeUnusedCode(ctx context.Context, function string) {
	used, err := m.CodeDirsInUse(ctx)
	if err != nil {
		return
	}
	vs, err := m.db.ListVersions(ctx, function)
	if err != nil {
		return
	}
	for _, v := range vs {
		if dir := filepath.Dir(v.Config.CodeDir); v.Collected && !used[dir] {
			if err := os.RemoveAll(dir); err != nil {
				m.log.Warn("remove a collected version's code", "function", function, "version", v.Number, "err", err)
			}
		}
	}
}

// CodeDirsInUse are the function directories (functions/<name>-<id>) the
// functions, their versions that are not collected and the deploys under
// way point to.
func (m *Manager) CodeDirsInUse(ctx context.Context) (map[string]bool, error) {
	fns, err := m.db.ListFunctions(ctx)
	if err != nil {
		return nil, err
	}
	vs, err := m.db.ListVersions(ctx, "")
	if err != nil {
		return nil, err
	}
	used := map[string]bool{}
	for _, f := range fns {
		used[filepath.Dir(f.CodeDir)] = true
	}
	for _, v := range vs {
		if !v.Collected {
			used[filepath.Dir(v.Config.CodeDir)] = true
		}
	}
	m.mu.Lock()
	for _, fn := range m.pending {
		used[filepath.Dir(fn.CodeDir)] = true
	}
	m.mu.Unlock()
	return used, nil
}

// RemovePendingSnapshots deletes the snapshots of deploys that never
// published their version (a crash in the middle of a deploy).
func (m *Manager) RemovePendingSnapshots(ctx context.Context) error {
	snaps, err := m.db.ListSnapshots(ctx, "")
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Version >= 0 {
			continue
		}
		if err := m.db.DeleteSnapshot(ctx, sn.ID); err != nil {
			return err
		}
		if err := os.RemoveAll(sn.Dir); err != nil {
			return err
		}
		m.log.Warn("removed the snapshot of an unfinished deploy", "function", sn.Function, "snapshot", sn.ID)
	}
	return nil
}
