package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	ver "github.com/thaw-dev/thaw/internal/versions"
)

// VersionInfo is a version with its newest snapshot and the aliases that
// route to it.
type VersionInfo struct {
	*catalog.Version
	Snapshot string
	Aliases  []string
}

// ListVersions returns a function's versions, oldest first.
func (m *Manager) ListVersions(ctx context.Context, function string) ([]*VersionInfo, error) {
	if _, err := m.deps.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	vs, err := m.db.ListVersions(ctx, function)
	if err != nil {
		return nil, err
	}
	return m.versionInfo(ctx, function, vs...)
}

// GetVersion returns one version of a function.
func (m *Manager) GetVersion(ctx context.Context, function string, number int) (*catalog.Version, error) {
	v, err := m.db.GetVersion(ctx, function, number)
	if err != nil {
		return nil, m.versionErr(ctx, ver.Ref{Function: function, Version: number}, err)
	}
	return v, nil
}

// GetVersionInfo returns one version of a function with its snapshot and
// aliases.
func (m *Manager) GetVersionInfo(ctx context.Context, function string, number int) (*VersionInfo, error) {
	v, err := m.GetVersion(ctx, function, number)
	if err != nil {
		return nil, err
	}
	out, err := m.versionInfo(ctx, function, v)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func (m *Manager) versionInfo(ctx context.Context, function string, vs ...*catalog.Version) ([]*VersionInfo, error) {
	snaps, err := m.db.ListSnapshots(ctx, function)
	if err != nil {
		return nil, err
	}
	aliases, err := m.db.ListAliases(ctx, function)
	if err != nil {
		return nil, err
	}
	out := make([]*VersionInfo, len(vs))
	for i, v := range vs {
		vi := &VersionInfo{Version: v}
		for _, sn := range snaps { // oldest first: the last is the newest
			if sn.Version == v.Number {
				vi.Snapshot = sn.ID
			}
		}
		for _, a := range aliases {
			if r, err := AliasRouting(a); err == nil && slices.Contains(r.Versions(), v.Number) {
				vi.Aliases = append(vi.Aliases, a.Name)
			}
		}
		out[i] = vi
	}
	return out, nil
}

// ListAliases returns a function's aliases.
func (m *Manager) ListAliases(ctx context.Context, function string) ([]*catalog.Alias, error) {
	if _, err := m.deps.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	return m.db.ListAliases(ctx, function)
}

// GetAlias returns one alias of a function.
func (m *Manager) GetAlias(ctx context.Context, function, name string) (*catalog.Alias, error) {
	if err := ver.CheckAlias(name); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	a, err := m.db.GetAlias(ctx, function, name)
	if err != nil {
		return nil, m.versionErr(ctx, ver.Ref{Function: function, Alias: name}, err)
	}
	return a, nil
}

// SetAlias routes an alias of a function to one version, or two by
// weight; it creates the alias if needed.
func (m *Manager) SetAlias(ctx context.Context, function, name string, routing ver.Routing) (*catalog.Alias, error) {
	if err := ver.CheckAlias(name); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	if err := routing.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	if _, err := m.deps.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(routing)
	a, err := m.db.SetAlias(ctx, function, name, b, routing.Versions())
	switch {
	case errors.Is(err, catalog.ErrCollected):
		return nil, fmt.Errorf("%w: %v: its snapshots were collected; deploy it again", errdefs.ErrConflict, err)
	case err != nil:
		return nil, err
	}
	m.log.Info("alias set", "function", function, "alias", name, "routing", routing.String())
	return a, nil
}

// DeleteAlias removes an alias of a function. live is kept while the
// function has versions: unqualified invocations follow it.
func (m *Manager) DeleteAlias(ctx context.Context, function, name string) error {
	if _, err := m.GetAlias(ctx, function, name); err != nil {
		return err
	}
	return m.db.DeleteAlias(ctx, function, name)
}

// RollbackResult says where a rollback moved live from and to.
type RollbackResult struct {
	Function string  `json:"function"`
	From     int     `json:"from"`
	To       int     `json:"to"`
	MS       float64 `json:"ms"`
}

// Rollback moves a function's live alias to version to (0: the version
// live pointed to before, or the newest earlier one with a snapshot). It
// boots nothing: that version's snapshot is still there.
func (m *Manager) Rollback(ctx context.Context, function string, to int) (*RollbackResult, error) {
	t0 := time.Now()
	a, err := m.GetAlias(ctx, function, ver.Live)
	if err != nil {
		return nil, err
	}
	routing, err := AliasRouting(a)
	if err != nil {
		return nil, err
	}
	from := routing.Primary()
	if to == 0 {
		ready, err := m.readyVersions(ctx, function)
		if err != nil {
			return nil, err
		}
		if to, err = ver.RollbackTarget(from, a.History, ready); err != nil {
			return nil, fmt.Errorf("%w: %v", errdefs.ErrConflict, err)
		}
	}
	if _, err := m.NewestSnapshotOf(ctx, function, to); err != nil {
		if _, verr := m.GetVersion(ctx, function, to); verr != nil {
			return nil, verr
		}
		return nil, err
	}
	if _, err := m.SetAlias(ctx, function, ver.Live, ver.Routing{{Version: to, Weight: ver.MaxWeight}}); err != nil {
		return nil, err
	}
	res := &RollbackResult{Function: function, From: from, To: to, MS: ms(time.Since(t0))}
	m.log.Info("rolled back", "function", function, "from", from, "to", to, "ms", res.MS)
	return res, nil
}

// readyVersions are the versions of function with a snapshot.
func (m *Manager) readyVersions(ctx context.Context, function string) ([]int, error) {
	snaps, err := m.db.ListSnapshots(ctx, function)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, sn := range snaps {
		if sn.Version > 0 && !seen[sn.Version] {
			seen[sn.Version] = true
			out = append(out, sn.Version)
		}
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
