package adaptive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// What a cold start teaches the adaptive restore (Observe), and what it
// keeps for the refreshes of a prepare's sets (KeepEvent).

// Observation is what one answered cold invocation teaches.
type Observation struct {
	Inv      *wire.Invocation
	Event    json.RawMessage // the request's: a refresh from traffic may use it once
	Variant  bool            // a variant of its strategy restored it (not counted)
	Snapshot string
	Version  int
}

// Observe adds a cold start's measurements to its version's evidence and
// drift windows, and starts what they call for: a refresh of a set that
// drifted, a prepare of a snapshot without artifacts.
func (m *Manager) Observe(ctx context.Context, o Observation) {
	inv := o.Inv
	rt := inv.Timing.Restore
	if rt == nil || o.Variant || inv.Function == "" {
		return
	}
	fn, err := m.deps.Catalog.GetFunction(ctx, inv.Function)
	if err != nil {
		return
	}
	set := m.settingsOf(ctx, fn)
	loc := locLocal
	if rt.Source == "registry" {
		loc = locRemote
	}
	now := time.Now()
	m.mu.Lock()
	vs := m.state(ctx, fn, o.Version)
	l := vs.location(loc)
	if l.Snapshot != o.Snapshot {
		l.Reset(o.Snapshot)
	}
	if inv.OK && rt.VMM == "started" {
		l.Observe(inv.Strategy, sampleOf(inv, now))
	}
	var refresh *refreshPlan
	if loc == locLocal && inv.StrategyStats != nil && inv.StrategyStats.SetPages > 0 {
		refresh = m.drift(vs, o, set, fn.Name)
	}
	prep := loc == locLocal && set.strategy == wire.StrategyAuto && m.unprepared(vs, o)
	m.save(ctx, fn.Name, o.Version, vs)
	m.mu.Unlock()
	if refresh != nil {
		m.startRefresh(fn, o.Version, *refresh)
	}
	if prep {
		m.startPrepare(fn, o.Version, o.Snapshot, set, o.Event)
	}
}

// sampleOf is an invocation's sample: its total (without an import), set-up and resume, the
// faults it took (the VMM's major faults, those the strategy served) and
// the bytes read for it (by the VMM from storage, by the daemon for the
// strategy, by the memory source from the registry).
func sampleOf(inv *wire.Invocation, at time.Time) policy.Sample {
	rt := inv.Timing.Restore
	// An import (the function fetched from the registry first) is part of
	// the total but not of the restore the strategy made.
	s := policy.Sample{At: at, TotalMS: inv.Timing.TotalMS - inv.Timing.ImportMS, SetupMS: rt.SetupMS, ResumeMS: rt.ResumeMS}
	if p := inv.Process; p != nil {
		s.Faults += p.MajorFaults
		s.BytesRead += p.ReadBytes
	}
	if st := inv.StrategyStats; st != nil {
		s.Faults += st.ServedFaults + st.SourceFaults
		s.BytesRead += st.DaemonReadBytes + st.SourceFetchedBytes
	}
	return s
}

// refreshPlan is a refresh to start.
type refreshPlan struct {
	snapshot string
	kind     restore.Kind
	reason   string
	event    json.RawMessage // nil: the prepare's record input
}

// drift adds the cold start's outside ratio to its strategy's window on
// the snapshot (m.mu held) and returns a refresh to start when the window
// has drifted and the function's refresh mode, the version's state and the
// backoff allow one.
func (m *Manager) drift(vs *restoreState, o Observation, set settings, fn string) *refreshPlan {
	st := o.Inv.StrategyStats
	if vs.DriftSnapshot != o.Snapshot {
		vs.DriftSnapshot, vs.Drift, vs.Held = o.Snapshot, nil, nil
	}
	if vs.Drift == nil {
		vs.Drift = map[string]*policy.DriftWindow{}
	}
	kind := o.Inv.Strategy
	w := vs.Drift[kind]
	if w == nil {
		w = &policy.DriftWindow{}
		vs.Drift[kind] = w
	}
	ratio := st.SetOutsideRatio
	m.deps.Metrics.SetUse(kind, ratio)
	held := set.refresh == wire.RefreshPrepare && vs.Held[kind] != "" // traffic may still help
	if !w.Observe(ratio) || set.refresh == wire.RefreshOff || held || m.busy[verKey{fn, o.Version}] ||
		m.backingOff(vs, time.Now()) {
		return nil
	}
	p := &refreshPlan{snapshot: o.Snapshot, kind: restore.Kind(kind), reason: fmt.Sprintf(
		"%s: %d of the last %d cold starts touched more than %.0f%% of their pages outside the recorded set (the last %.0f%%)",
		kind, w.Drifted(), len(w.Ratios), policy.DriftThreshold*100, ratio*100)}
	if set.refresh == wire.RefreshTraffic {
		p.event = append(json.RawMessage(nil), o.Event...)
		if len(p.event) == 0 {
			p.event = json.RawMessage("null")
		}
	}
	return p
}

// backingOff: the version's last background work failed less than Backoff
// ago.
func (m *Manager) backingOff(vs *restoreState, now time.Time) bool {
	if n := len(vs.Refreshes); n > 0 {
		if r := vs.Refreshes[n-1]; r.State == wire.OpFailed && now.Sub(r.EndedAt) < m.cfg.Backoff {
			return true
		}
	}
	if p := vs.Prepare; p != nil && p.State == wire.OpFailed && now.Sub(p.EndedAt) < m.cfg.Backoff {
		return true
	}
	return false
}

// unprepared counts a cold start under auto on a local snapshot without
// artifacts of any strategy that records (m.mu held) and says whether a
// background prepare is due.
func (m *Manager) unprepared(vs *restoreState, o Observation) bool {
	if m.cfg.PrepareAfter < 0 || m.busy[verKey{o.Inv.Function, o.Version}] {
		return false
	}
	sn, err := m.deps.Catalog.GetSnapshot(context.Background(), o.Snapshot)
	if err != nil || sn.RemoteMemory {
		return false
	}
	snap := restore.Snapshot{Dir: sn.Dir}
	for _, st := range m.deps.Strategies {
		if st.Record != nil && st.Ready != nil && st.Ready(snap, restore.Env{}) {
			vs.Unprepared, vs.UnpreparedSnapshot = 0, ""
			return false
		}
	}
	if vs.UnpreparedSnapshot != o.Snapshot {
		vs.Unprepared, vs.UnpreparedSnapshot = 0, o.Snapshot
	}
	vs.Unprepared++
	if p := vs.Prepare; p != nil && p.State == wire.OpSucceeded && p.Snapshot != "" {
		// Prepared once already; its snapshot went (retention, a delete).
		_, err := m.deps.Catalog.GetSnapshot(context.Background(), p.Snapshot)
		if err == nil || !errors.Is(err, catalog.ErrNotFound) {
			return false
		}
	}
	return vs.Unprepared >= m.cfg.PrepareAfter && !m.backingOff(vs, time.Now())
}

// MeasureSet fills a cold invocation's set use: how the guest of VM vm
// (its VMM's pid) used its strategy's recorded set, as sess serves it
// (nothing for strategies without one).
func (m *Manager) MeasureSet(sess restore.Session, pid int, vm string, inv *wire.Invocation) {
	if sess == nil || inv.StrategyStats == nil {
		return
	}
	u, err := restore.MeasureSet(sess, pid)
	if err != nil {
		if !errors.Is(err, restore.ErrNoSet) {
			m.deps.Log.Debug("set use not measured", "vm", vm, "err", err)
		}
		return
	}
	inv.StrategyStats.SetUseStats = u
}

// KeepEvent keeps the record input of a prepare's warm snapshot, for its
// working sets' refreshes (not one an invocation gave, fromTraffic: used
// once).
func (m *Manager) KeepEvent(ctx context.Context, warm string, event json.RawMessage, fromTraffic bool) {
	if fromTraffic {
		return
	}
	ev := event
	if len(ev) == 0 {
		ev = json.RawMessage("null")
	}
	if err := m.deps.Catalog.PutPrepareEvent(context.WithoutCancel(ctx), warm, ev); err != nil {
		m.deps.Log.Warn("record input not kept; refreshes of its working sets need traffic", "snapshot", warm, "err", err)
	}
}
