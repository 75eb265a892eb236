package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	ver "github.com/thaw-dev/thaw/internal/versions"
)

// SnapshotFunction is the configuration a snapshot restores with: its
// version's, frozen at deploy; the function's own for a snapshot made by
// hand; a deploy's under way for its pending snapshots.
func (m *Manager) SnapshotFunction(ctx context.Context, sn *catalog.Snapshot) (*catalog.Function, error) {
	switch {
	case sn.Version > 0:
		v, err := m.db.GetVersion(ctx, sn.Function, sn.Version)
		if err != nil {
			return nil, err
		}
		fn := v.Config
		return &fn, nil
	case sn.Version < 0:
		m.mu.Lock()
		fn := m.pending[sn.ID]
		m.mu.Unlock()
		if fn == nil {
			return nil, fmt.Errorf("snapshot %s belongs to a deploy that did not finish", sn.ID)
		}
		return fn, nil
	}
	return m.db.GetFunction(ctx, sn.Function)
}

// Target is what an invocation of a reference resolved to.
type Target struct {
	Version int    // 0: the function's unversioned snapshots
	Alias   string // the alias followed, if any
}

// Resolve picks the version an invocation of ref runs: the one named, one
// of its alias's routes by weight, or (unqualified) the live alias's if
// the function has one.
func (m *Manager) Resolve(ctx context.Context, ref ver.Ref) (Target, error) {
	if ref.Version > 0 {
		v, err := m.db.GetVersion(ctx, ref.Function, ref.Version)
		if err != nil {
			return Target{}, m.versionErr(ctx, ref, err)
		}
		if v.Collected {
			return Target{}, fmt.Errorf("%w: version %s was collected (only the newest %d versions and alias targets keep their snapshots); deploy it again", errdefs.ErrConflict, ref, m.Keep())
		}
		return Target{Version: v.Number}, nil
	}
	name := ref.Alias
	if name == "" {
		name = ver.Live
	}
	a, err := m.db.GetAlias(ctx, ref.Function, name)
	if errors.Is(err, catalog.ErrNotFound) && ref.Alias == "" {
		return Target{}, nil // never deployed: its snapshots made by hand
	}
	if err != nil {
		return Target{}, m.versionErr(ctx, ref, err)
	}
	routing, err := AliasRouting(a)
	if err != nil {
		return Target{}, err
	}
	return Target{Version: routing.Pick(m.uniform()), Alias: name}, nil
}

// ConfigOf is the configuration and version a reference boots: a named
// version's; an alias's main version's; unqualified, the function's own
// (version 0) unless followLive and the function has a live alias.
func (m *Manager) ConfigOf(ctx context.Context, ref ver.Ref, followLive bool) (*catalog.Function, int, error) {
	if !ref.Qualified() && followLive {
		if _, err := m.db.GetAlias(ctx, ref.Function, ver.Live); err == nil {
			ref.Alias = ver.Live
		}
	}
	if !ref.Qualified() {
		fn, err := m.deps.GetFunction(ctx, ref.Function)
		return fn, 0, err
	}
	n, err := m.resolvePrimary(ctx, ref)
	if err != nil {
		return nil, 0, err
	}
	v, err := m.GetVersion(ctx, ref.Function, n)
	if err != nil {
		return nil, 0, err
	}
	if v.Collected {
		return nil, 0, fmt.Errorf("%w: version %s:%d was collected; deploy it again", errdefs.ErrConflict, ref.Function, n)
	}
	return &v.Config, v.Number, nil
}

// resolvePrimary is the version a qualified reference names: the version,
// or its alias's main one (the most traffic).
func (m *Manager) resolvePrimary(ctx context.Context, ref ver.Ref) (int, error) {
	if ref.Version > 0 {
		return ref.Version, nil
	}
	a, err := m.db.GetAlias(ctx, ref.Function, ref.Alias)
	if err != nil {
		return 0, m.versionErr(ctx, ref, err)
	}
	routing, err := AliasRouting(a)
	if err != nil {
		return 0, err
	}
	return routing.Primary(), nil
}

// versionErr says which of function, version and alias is missing.
func (m *Manager) versionErr(ctx context.Context, ref ver.Ref, err error) error {
	if !errors.Is(err, catalog.ErrNotFound) {
		return err
	}
	if _, ferr := m.db.GetFunction(ctx, ref.Function); ferr != nil {
		return ferr
	}
	if ref.Version > 0 {
		return fmt.Errorf("function %q has no version %d: %w", ref.Function, ref.Version, errdefs.ErrNotFound)
	}
	return fmt.Errorf("function %q has no alias %q: %w", ref.Function, ref.Alias, errdefs.ErrNotFound)
}

// AliasRouting reads and checks an alias's routing.
func AliasRouting(a *catalog.Alias) (ver.Routing, error) {
	var r ver.Routing
	if err := json.Unmarshal(a.Routing, &r); err != nil {
		return nil, fmt.Errorf("alias %s:%s: routing: %w", a.Function, a.Name, err)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("alias %s:%s: %w", a.Function, a.Name, err)
	}
	return r, nil
}

// NewestSnapshotOf is the newest snapshot of function's version (0: of
// the snapshots made by hand).
func (m *Manager) NewestSnapshotOf(ctx context.Context, function string, version int) (string, error) {
	if _, err := m.deps.GetFunction(ctx, function); err != nil {
		return "", err
	}
	snaps, err := m.db.ListSnapshots(ctx, function)
	if err != nil {
		return "", err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Version == version {
			return snaps[i].ID, nil
		}
	}
	if version > 0 {
		return "", fmt.Errorf("%w: version %d of %q has no snapshot (deleted by hand?); deploy it again", errdefs.ErrConflict, version, function)
	}
	if vs, _ := m.db.ListVersions(ctx, function); len(vs) > 0 {
		return "", fmt.Errorf("%w: function %q has versions but no %s alias and no snapshot made by hand; invoke %s:VERSION or set the alias (thaw alias set %s %s VERSION)",
			errdefs.ErrConflict, function, ver.Live, function, function, ver.Live)
	}
	return "", fmt.Errorf("%w: function %q has no snapshot; deploy it (thaw deploy), or boot a VM and snapshot it", errdefs.ErrConflict, function)
}
