package adaptive

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// A function's restore settings and its restore document.

// SettingDefault in a request returns a setting to the daemon's default.
const SettingDefault = "default"

func checkStrategySetting(v string) error {
	if v == wire.StrategyAuto {
		return nil
	}
	if _, err := restore.ParseKind(v); err != nil || v == "" {
		return fmt.Errorf("strategy %q: give auto or one of the strategies", v)
	}
	return nil
}

func checkRefreshSetting(v string) error {
	switch v {
	case wire.RefreshPrepare, wire.RefreshTraffic, wire.RefreshOff:
		return nil
	}
	return fmt.Errorf("refresh %q: give prepare, traffic or off", v)
}

// CheckRestoreSettings validates a function's restore settings ("" or
// "default": the daemon's default) before anything is created.
func CheckRestoreSettings(strategy, refresh string) error {
	if strategy == SettingDefault {
		strategy = ""
	}
	if refresh == SettingDefault {
		refresh = ""
	}
	if strategy != "" {
		if err := checkStrategySetting(strategy); err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
		}
	}
	if refresh != "" {
		if err := checkRefreshSetting(refresh); err != nil {
			return fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
		}
	}
	return nil
}

// SetRestoreSettings changes a function's restore settings (a nil field
// keeps its setting, "" returns it to the daemon's default) and returns
// its restore document.
func (m *Manager) SetRestoreSettings(ctx context.Context, name string, req wire.RestoreSettings) (*wire.FunctionRestore, error) {
	var strategy, refresh string
	if req.Strategy != nil {
		strategy = *req.Strategy
	}
	if req.Refresh != nil {
		refresh = *req.Refresh
	}
	if err := CheckRestoreSettings(strategy, refresh); err != nil {
		return nil, err
	}
	strategy, refresh = orDefault(strategy), orDefault(refresh)
	fn, err := m.deps.GetFunction(ctx, name)
	if err != nil {
		return nil, err
	}
	r, err := m.deps.Catalog.RestoreSettings(ctx, name)
	if err != nil || !r.FunctionCreated.Equal(fn.CreatedAt) {
		r = &catalog.RestoreSettings{Function: name, FunctionCreated: fn.CreatedAt}
	}
	if req.Strategy != nil {
		r.Strategy = strategy
	}
	if req.Refresh != nil {
		r.Refresh = refresh
	}
	if err := m.deps.Catalog.PutRestoreSettings(ctx, r); err != nil {
		return nil, err
	}
	return m.FunctionRestore(ctx, name)
}

// FunctionRestore is a function's restore document: its settings and,
// per version with cold starts, the policy's choice and evidence, drift
// and refreshes.
func (m *Manager) FunctionRestore(ctx context.Context, name string) (*wire.FunctionRestore, error) {
	fn, err := m.deps.GetFunction(ctx, name)
	if err != nil {
		return nil, err
	}
	set := m.settingsOf(ctx, fn)
	out := &wire.FunctionRestore{Strategy: set.strategy, StrategyFrom: set.strategyFrom, Refresh: set.refresh, RefreshFrom: set.refreshFrom}
	if out.Strategy == "" {
		out.Strategy = string(restore.Default)
	}
	stored, err := m.deps.Catalog.RestoreStates(ctx, name)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for v := range stored {
		st := m.state(ctx, fn, v)
		if len(st.Locations) == 0 && len(st.Refreshes) == 0 && st.Prepare == nil {
			continue
		}
		out.Versions = append(out.Versions, versionBody(v, st))
	}
	sort.Slice(out.Versions, func(i, j int) bool { return out.Versions[i].Version > out.Versions[j].Version })
	return out, nil
}

// versionBody is a version's state as the API shows it.
func versionBody(v int, st *restoreState) wire.RestoreVersion {
	out := wire.RestoreVersion{Version: v, Prepare: st.Prepare}
	for _, loc := range []string{locLocal, locRemote} {
		l := st.Locations[loc]
		if l == nil {
			continue
		}
		rl := wire.RestoreLocation{Location: loc, Snapshot: l.Snapshot, Choice: l.Choice, Reason: l.Reason, ChangedAt: l.ChangedAt,
			ColdStarts: l.ColdStarts, Explorations: l.Explorations, Evidence: []wire.StrategyEvidence{}}
		rl.Evidence = append(rl.Evidence, l.Evidence()...)
		out.Locations = append(out.Locations, rl)
	}
	kinds := make([]string, 0, len(st.Drift))
	for k := range st.Drift {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		w := st.Drift[k]
		d := wire.DriftState{Strategy: k, ColdStarts: len(w.Ratios), Drifted: w.Drifted(), Held: st.Held[k]}
		if n := len(w.Ratios); n > 0 {
			d.LastOutsideRatio = w.Ratios[n-1]
		}
		out.Drift = append(out.Drift, d)
	}
	for i := len(st.Refreshes) - 1; i >= 0; i-- {
		out.Refreshes = append(out.Refreshes, st.Refreshes[i])
	}
	return out
}

// RestoreDoc is FunctionRestore for a function body (nil when it cannot
// be read: the function is shown without it).
func (m *Manager) RestoreDoc(ctx context.Context, name string) *wire.FunctionRestore {
	doc, err := m.FunctionRestore(ctx, name)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		m.deps.Log.Warn("function restore document", "function", name, "err", err)
	}
	return doc
}

// Created records a new function's restore settings ("" keeps the
// daemon's default), checked by CheckRestoreSettings before anything was
// made.
func (m *Manager) Created(ctx context.Context, fn *catalog.Function, strategy, refresh string) error {
	strategy, refresh = orDefault(strategy), orDefault(refresh)
	if strategy == "" && refresh == "" {
		return nil
	}
	return m.deps.Catalog.PutRestoreSettings(ctx, &catalog.RestoreSettings{Function: fn.Name, FunctionCreated: fn.CreatedAt,
		Strategy: strategy, Refresh: refresh})
}

// orDefault is a setting as kept: "" for the daemon's default.
func orDefault(v string) string {
	if v == SettingDefault {
		return ""
	}
	return v
}
