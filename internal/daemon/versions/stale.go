package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// Stale versions: a version records what its snapshots were made from
// (BuildInputs). When the daemon's guest image, kernel or machine changes,
// the version is stale: a rebuild (an operation) boots it again, snapshots
// it (or prepares it, if it was deployed prepared) and replaces its
// snapshots, one version at a time, in the background. Until then each
// cold start of it says so (StaleNote).

func versionKey(function string, number int) string { return fmt.Sprintf("%s:%d", function, number) }

// staleReasons says what differs between what a version was built from
// and what the daemon runs now ("" when nothing).
func staleReasons(was, now BuildInputs) string {
	var why []string
	short := func(s string) string {
		if len(s) > 12 {
			return s[:12]
		}
		return s
	}
	if was.Image != now.Image || was.Rootfs != now.Rootfs || was.Initrd != now.Initrd || was.Cmdline != now.Cmdline {
		why = append(why, fmt.Sprintf("guest image changed (%s, now %s)", short(was.Image), short(now.Image)))
	}
	if was.Kernel != now.Kernel {
		why = append(why, "kernel changed")
	}
	if was.Machine != now.Machine || was.VMM != now.VMM || was.Accel != now.Accel {
		why = append(why, fmt.Sprintf("machine changed (%s %s %s, now %s %s %s)", was.VMM, was.Machine, was.Accel, now.VMM, now.Machine, now.Accel))
	}
	return strings.Join(why, "; ")
}

// staleReasonLabel is staleReasons' first cause as a metric label.
func staleReasonLabel(why string) string {
	switch {
	case strings.HasPrefix(why, "guest image"):
		return "image"
	case strings.HasPrefix(why, "kernel"):
		return "kernel"
	case strings.HasPrefix(why, "machine"):
		return "machine"
	}
	return "other"
}

// StaleNote is why a version's snapshot is out of date, "" if it is not
// (or number is not a version's: 0, a snapshot made by hand).
func (m *Manager) StaleNote(function string, number int) string {
	if number <= 0 {
		return ""
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stale[versionKey(function, number)]
}

// markStale records why a version's snapshot is out of date.
func (m *Manager) markStale(function string, number int, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stale[versionKey(function, number)] = why
}

// ClearStale forgets that versions of function were out of date (rebuilt
// or deleted).
func (m *Manager) ClearStale(function string, numbers ...int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range numbers {
		delete(m.stale, versionKey(function, n))
	}
}

// acquireRebuild waits for the one rebuild slot; release gives it back.
func (m *Manager) acquireRebuild(ctx context.Context) (release func(), err error) {
	select {
	case m.rebuildSlot <- struct{}{}:
		return func() { <-m.rebuildSlot }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// CheckVersions finds the stale versions (at start) and rebuilds them in
// the background: aliased versions first, newest first. A rebuild that
// cannot start is logged; the version stays stale.
func (m *Manager) CheckVersions(ctx context.Context) error {
	vs, err := m.db.ListVersions(ctx, "")
	if err != nil {
		return fmt.Errorf("list versions: %w", err)
	}
	aliases, err := m.db.ListAliases(ctx, "")
	if err != nil {
		return fmt.Errorf("list aliases: %w", err)
	}
	aliased := map[string]bool{}
	for _, a := range aliases {
		if r, err := AliasRouting(a); err == nil {
			for _, n := range r.Versions() {
				aliased[versionKey(a.Function, n)] = true
			}
		}
	}
	now := m.deps.BuildInputs()
	var todo []*catalog.Version
	for _, v := range vs {
		var was BuildInputs
		if v.Collected || json.Unmarshal(v.Inputs, &was) != nil {
			continue
		}
		if why := staleReasons(was, now); why != "" {
			m.markStale(v.Function, v.Number, why)
			m.log.Warn("version stale: rebuilding it", "function", v.Function, "version", v.Number, "why", why)
			todo = append(todo, v)
		}
	}
	sort.SliceStable(todo, func(i, j int) bool {
		ai, aj := aliased[versionKey(todo[i].Function, todo[i].Number)], aliased[versionKey(todo[j].Function, todo[j].Number)]
		if ai != aj {
			return ai
		}
		return todo[i].CreatedAt.After(todo[j].CreatedAt)
	})
	for _, v := range todo {
		if err := m.startRebuild(ctx, v); err != nil {
			m.log.Error("start a rebuild", "function", v.Function, "version", v.Number, "err", err)
		}
	}
	return nil
}

// startRebuild rebuilds a stale version as an operation; rebuilds run one
// at a time.
func (m *Manager) startRebuild(ctx context.Context, v *catalog.Version) error {
	return m.deps.StartOperation(ctx, wire.OpRebuild, versionKey(v.Function, v.Number), func(ctx context.Context) (*wire.OperationResult, error) {
		m.deps.Phase(ctx, "waiting for earlier rebuilds")
		release, err := m.acquireRebuild(ctx)
		if err != nil {
			return nil, err
		}
		defer release()
		res, err := m.rebuild(ctx, v)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Deploy: res}, nil
	})
}

// rebuild snapshots a version again with what the daemon runs now, the
// way it was deployed, then deletes its older snapshots.
func (m *Manager) rebuild(ctx context.Context, v *catalog.Version) (res *wire.Deploy, err error) {
	why := m.StaleNote(v.Function, v.Number)
	defer func() {
		outcome := "ok"
		if err != nil {
			outcome = "failed"
			m.log.Error("version rebuild failed", "function", v.Function, "version", v.Number, "err", err)
		}
		m.deps.Metrics.VersionRebuild(staleReasonLabel(why), outcome)
	}()
	t0 := time.Now()
	// The function may have been deleted, or the version collected, while
	// the rebuild waited for its turn.
	if cur, err := m.db.GetVersion(ctx, v.Function, v.Number); err != nil || cur.Collected {
		if err == nil {
			err = fmt.Errorf("%w: version %s:%d was collected", errdefs.ErrConflict, v.Function, v.Number)
		}
		return nil, err
	}
	old, err := m.db.ListSnapshots(ctx, v.Function)
	if err != nil {
		return nil, err
	}
	cfg := v.Config
	res = &wire.Deploy{Function: v.Function, Version: v.Number, Digest: v.Digest}
	made, err := m.resnapshot(ctx, v, &cfg, res)
	if err != nil {
		return nil, err
	}
	inputs, _ := json.Marshal(m.deps.BuildInputs())
	if err := m.db.SetVersionInputs(ctx, v.Function, v.Number, inputs); err != nil {
		for _, id := range made { // the version went meanwhile: so do its new snapshots
			_ = m.deps.DeleteSnapshot(context.WithoutCancel(ctx), id)
		}
		return nil, err
	}
	m.ClearStale(v.Function, v.Number)
	for _, sn := range old {
		if sn.Version != v.Number {
			continue
		}
		if err := m.deps.DeleteSnapshot(ctx, sn.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			m.log.Warn("rebuild: an older snapshot stays", "snapshot", sn.ID, "err", err)
		}
	}
	res.Snapshots, res.Timing.TotalMS = made, ms(time.Since(t0))
	m.log.Info("version rebuilt", "function", v.Function, "version", v.Number, "was", why, "total_ms", res.Timing.TotalMS)
	return res, nil
}

// resnapshot makes a version's new snapshots from cfg, its frozen
// configuration: prepared again (clean and warm) with its recorded record
// input if it was deployed prepared, else booted and snapshotted.
func (m *Manager) resnapshot(ctx context.Context, v *catalog.Version, cfg *catalog.Function, res *wire.Deploy) ([]string, error) {
	t0 := time.Now()
	if v.RecordEvent != nil {
		var record json.RawMessage
		if string(v.RecordEvent) != "null" {
			record = v.RecordEvent
		}
		p, err := m.deps.Prepare(m.deps.SubProgress(ctx, "prepare: "), cfg, v.Number, record)
		if err != nil {
			return nil, err
		}
		res.Timing.PrepareMS, res.Timing.BootMS = ms(time.Since(t0)), p.Timing.BootMS
		return []string{p.Clean.ID, p.Warm.ID}, nil
	}
	vm, err := m.deps.Boot(m.deps.SubProgress(ctx, "boot: "), cfg, v.Number)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	sn, err := m.deps.CreateSnapshot(ctx, vm.ID)
	_ = m.deps.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if err != nil {
		return nil, err
	}
	return []string{sn.ID}, nil
}
