package daemon

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// The cold path's side of the adaptive restore: the strategy of a cold
// start that names none (choose), and what its measurements teach (observe).

// Rules: where a location without evidence starts, measured
// (docs/bench/adaptive.md): locally in the strategies' AutoOrder
// (FaaSnap's loading set, then REAP, ...); from the registry the remote
// strategy (REAP unless set), which fetches the least before the guest
// runs, then the same order.
func localOrder(sts []restore.Strategy) ([]restore.Kind, string) {
	sts = slices.Clone(sts)
	slices.SortStableFunc(sts, func(a, b restore.Strategy) int { return cmp.Compare(autoRank(a), autoRank(b)) })
	var order []restore.Kind
	var names []string
	for _, st := range sts {
		if st.Auto {
			order, names = append(order, st.Kind), append(names, string(st.Kind))
		}
	}
	if len(names) == 0 {
		return nil, "locally, none"
	}
	return order, fmt.Sprintf("locally, %s where the snapshot has its artifacts, then %s", names[0], strings.Join(names[1:], ", "))
}

// autoRank is st's place in the local rule: its AutoOrder, unranked last.
func autoRank(st restore.Strategy) int {
	if st.AutoOrder == 0 {
		return math.MaxInt
	}
	return st.AutoOrder
}

// autoChoice is a cold start whose strategy the policy is to decide.
type autoChoice struct {
	snapID, loc, rule string
	arms              []string
	sn                *catalog.Snapshot
	fn                *catalog.Function
}

// settle picks the strategy of a cold start up to the policy's decision:
// the request's, else the function's fixed one, else, under auto and for
// requests that name no snapshot, the policy's (decide). It returns the
// strategy and why when it is fixed (the request's, the function's, the
// daemon's), else the auto choice to decide, which nothing has recorded
// yet (a request a ready clone serves restores nothing and is no cold
// start).
func (a *adaptive) settle(ctx context.Context, req ColdRequest, snapID string, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice, *autoChoice) {
	if req.Strategy != "" {
		return st, &wire.StrategyChoice{How: "request"}, nil
	}
	sn, err := a.s.GetSnapshot(ctx, snapID)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	}
	fn, err := a.s.db.GetFunction(ctx, sn.Function)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	}
	set := a.settingsOf(ctx, fn)
	switch {
	case set.strategy == "", set.strategyFrom == "daemon" && set.strategy != wire.StrategyAuto && sn.RemoteMemory:
		// The daemon's fixed default; snapshots in the registry restore
		// with its remote strategy, as coldTarget chose.
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	case set.strategy != wire.StrategyAuto:
		fixed, err := a.s.strategy(set.strategy)
		if err != nil { // not offered by this daemon: its default
			return st, &wire.StrategyChoice{How: "daemon", Reason: err.Error()}, nil
		}
		return fixed, &wire.StrategyChoice{How: set.strategyFrom}, nil
	case req.Snapshot != "": // a snapshot named: the evidence is the version's newest's
		return st, &wire.StrategyChoice{How: "daemon", Reason: "a named snapshot restores with the daemon's default"}, nil
	}
	loc, arms, rule, err := a.arms(sn)
	if err != nil || len(arms) == 0 {
		return st, &wire.StrategyChoice{How: "daemon", Reason: fmt.Sprintf("no strategy can restore %s: %v", snapID, err)}, nil
	}
	return st, nil, &autoChoice{snapID: snapID, loc: loc, rule: rule, arms: arms, sn: sn, fn: fn}
}

// decide is the policy's choice for c, counted as a cold start of its
// location; st if the strategy chosen is not offered.
func (a *adaptive) decide(ctx context.Context, c *autoChoice, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice) {
	queueing := a.s.adm.Queued() > 0
	a.mu.Lock()
	vs := a.state(ctx, c.fn, max(c.sn.Version, 0))
	l := vs.location(c.loc)
	if l.Snapshot != c.snapID {
		l.Reset(c.snapID)
	}
	d := l.Decide(policy.Options{Arms: c.arms, Rule: c.rule, Queueing: queueing, Now: time.Now(), Rand: a.rng})
	a.mu.Unlock()
	a.s.metrics.RestoreChoice(d.Strategy, c.loc, d.How)
	chosen, err := a.s.strategy(d.Strategy)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon", Reason: err.Error()}
	}
	return chosen, &wire.StrategyChoice{How: d.How, Reason: d.Reason}
}

// current is the strategy auto restores snapshot snapID with now, read
// without deciding (nothing is counted): its location's current choice,
// else its rule's first; a ready clone's fill restores with it.
func (a *adaptive) current(ctx context.Context, snapID string) (restore.Strategy, error) {
	sn, err := a.s.GetSnapshot(ctx, snapID)
	if err != nil {
		return restore.Strategy{}, err
	}
	fn, err := a.s.db.GetFunction(ctx, sn.Function)
	if err != nil {
		return restore.Strategy{}, err
	}
	loc, arms, _, err := a.arms(sn)
	if err != nil {
		return restore.Strategy{}, err
	}
	if len(arms) == 0 {
		return restore.Strategy{}, fmt.Errorf("%w: no strategy can restore snapshot %s", ErrSnapshotUnusable, snapID)
	}
	pick := arms[0]
	a.mu.Lock()
	if l := a.state(ctx, fn, max(sn.Version, 0)).Locations[loc]; l != nil && l.Snapshot == snapID && slices.Contains(arms, l.Choice) {
		pick = l.Choice
	}
	a.mu.Unlock()
	return a.s.strategy(pick)
}

// arms are the strategies auto may choose for sn, in its location's order
// of preference: those the daemon offers, that restore the snapshot where
// its memory is (lazily from the registry, or from the local file) and
// whose artifacts exist.
func (a *adaptive) arms(sn *catalog.Snapshot) (loc string, arms []string, rule string, err error) {
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		return "", nil, "", err
	}
	snap := restore.Snapshot{Dir: sn.Dir, Manifest: m}
	env := restore.Env{Store: a.s.store}
	order, rule := localOrder(a.s.strategies)
	loc = locLocal
	if sn.RemoteMemory {
		loc = locRemote
		remote := restore.Kind(a.s.cfg.RemoteStrategy)
		order = append([]restore.Kind{remote}, order...) // those that do not restore lazily are skipped below
		rule = fmt.Sprintf("a snapshot in the registry starts with %s (it fetches the least before the guest runs)", remote)
	}
	for _, k := range order {
		if slices.Contains(arms, string(k)) {
			continue
		}
		for _, st := range a.s.strategies {
			if st.Kind != k || !st.Auto || sn.RemoteMemory && !st.Lazy || st.Ready != nil && !st.Ready(snap, env) {
				continue
			}
			arms = append(arms, string(k))
		}
	}
	return loc, arms, rule, nil
}

// coldObservation is what one answered cold invocation teaches.
type coldObservation struct {
	inv      *Invocation
	event    json.RawMessage // the request's: a refresh from traffic may use it once
	variant  bool
	snapshot string
	version  int
}

// observe adds a cold start's measurements to its version's evidence and
// drift windows, and starts what they call for: a refresh of a set that
// drifted, a prepare of a snapshot without artifacts.
func (a *adaptive) observe(ctx context.Context, o coldObservation) {
	inv := o.inv
	rt := inv.Timing.Restore
	if rt == nil || o.variant || inv.Function == "" {
		return
	}
	fn, err := a.s.db.GetFunction(ctx, inv.Function)
	if err != nil {
		return
	}
	set := a.settingsOf(ctx, fn)
	loc := locLocal
	if rt.Source == "registry" {
		loc = locRemote
	}
	now := time.Now()
	a.mu.Lock()
	vs := a.state(ctx, fn, o.version)
	l := vs.location(loc)
	if l.Snapshot != o.snapshot {
		l.Reset(o.snapshot)
	}
	if inv.OK && rt.VMM == "started" {
		l.Observe(inv.Strategy, sampleOf(inv, now))
	}
	var refresh *refreshPlan
	if loc == locLocal && inv.StrategyStats != nil && inv.StrategyStats.SetPages > 0 {
		refresh = a.drift(vs, o, set, fn.Name)
	}
	prep := loc == locLocal && set.strategy == wire.StrategyAuto && a.unprepared(vs, o)
	a.save(ctx, fn.Name, o.version, vs)
	a.mu.Unlock()
	if refresh != nil {
		a.startRefresh(fn, o.version, *refresh)
	}
	if prep {
		a.startPrepare(fn, o.version, o.snapshot, set, o.event)
	}
}

// sampleOf is an invocation's sample: its total (without an import), set-up and resume, the
// faults it took (the VMM's major faults, those the strategy served) and
// the bytes read for it (by the VMM from storage, by the daemon for the
// strategy, by the memory source from the registry).
func sampleOf(inv *Invocation, at time.Time) policy.Sample {
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
// the snapshot (a.mu held) and returns a refresh to start when the window
// has drifted and the function's refresh mode, the version's state and the
// backoff allow one.
func (a *adaptive) drift(vs *restoreState, o coldObservation, set settings, fn string) *refreshPlan {
	st := o.inv.StrategyStats
	if vs.DriftSnapshot != o.snapshot {
		vs.DriftSnapshot, vs.Drift, vs.Held = o.snapshot, nil, nil
	}
	if vs.Drift == nil {
		vs.Drift = map[string]*policy.DriftWindow{}
	}
	kind := o.inv.Strategy
	w := vs.Drift[kind]
	if w == nil {
		w = &policy.DriftWindow{}
		vs.Drift[kind] = w
	}
	ratio := st.SetOutsideRatio
	a.s.metrics.SetUse(kind, ratio)
	held := set.refresh == wire.RefreshPrepare && vs.Held[kind] != "" // traffic may still help
	if !w.Observe(ratio) || set.refresh == wire.RefreshOff || held || a.busy[verKey{fn, o.version}] ||
		a.backingOff(vs, time.Now()) {
		return nil
	}
	p := &refreshPlan{snapshot: o.snapshot, kind: restore.Kind(kind), reason: fmt.Sprintf(
		"%s: %d of the last %d cold starts touched more than %.0f%% of their pages outside the recorded set (the last %.0f%%)",
		kind, w.Drifted(), len(w.Ratios), policy.DriftThreshold*100, ratio*100)}
	if set.refresh == wire.RefreshTraffic {
		p.event = append(json.RawMessage(nil), o.event...)
		if len(p.event) == 0 {
			p.event = json.RawMessage("null")
		}
	}
	return p
}

// backingOff: the version's last background work failed less than Backoff
// ago.
func (a *adaptive) backingOff(vs *restoreState, now time.Time) bool {
	if n := len(vs.Refreshes); n > 0 {
		if r := vs.Refreshes[n-1]; r.State == wire.OpFailed && now.Sub(r.EndedAt) < a.cfg.Backoff {
			return true
		}
	}
	if p := vs.Prepare; p != nil && p.State == wire.OpFailed && now.Sub(p.EndedAt) < a.cfg.Backoff {
		return true
	}
	return false
}

// unprepared counts a cold start under auto on a local snapshot without
// artifacts of any strategy that records (a.mu held) and says whether a
// background prepare is due.
func (a *adaptive) unprepared(vs *restoreState, o coldObservation) bool {
	if a.cfg.PrepareAfter < 0 || a.busy[verKey{o.inv.Function, o.version}] {
		return false
	}
	sn, err := a.s.db.GetSnapshot(context.Background(), o.snapshot)
	if err != nil || sn.RemoteMemory {
		return false
	}
	snap := restore.Snapshot{Dir: sn.Dir}
	for _, st := range a.s.strategies {
		if st.Record != nil && st.Ready != nil && st.Ready(snap, restore.Env{}) {
			vs.Unprepared, vs.UnpreparedSnapshot = 0, ""
			return false
		}
	}
	if vs.UnpreparedSnapshot != o.snapshot {
		vs.Unprepared, vs.UnpreparedSnapshot = 0, o.snapshot
	}
	vs.Unprepared++
	if p := vs.Prepare; p != nil && p.State == wire.OpSucceeded && p.Snapshot != "" {
		// Prepared once already; its snapshot went (retention, a delete).
		_, err := a.s.db.GetSnapshot(context.Background(), p.Snapshot)
		if err == nil || !errors.Is(err, catalog.ErrNotFound) {
			return false
		}
	}
	return vs.Unprepared >= a.cfg.PrepareAfter && !a.backingOff(vs, time.Now())
}

// measureSet fills the invocation's set use: how the guest of a locked VM
// used its strategy's recorded set (nothing for strategies without one).
func (a *adaptive) measureSet(lv *liveVM, inv *Invocation) {
	if lv.sess == nil || inv.StrategyStats == nil {
		return
	}
	u, err := restore.MeasureSet(lv.sess, lv.m.PID())
	if err != nil {
		if !errors.Is(err, restore.ErrNoSet) {
			a.s.log.Debug("set use not measured", "vm", lv.id, "err", err)
		}
		return
	}
	inv.StrategyStats.SetUseStats = u
}

// keepEvent keeps the record input of a prepare's warm snapshot, for its
// working sets' refreshes (not one an invocation gave: used once).
func (a *adaptive) keepEvent(ctx context.Context, warm string, req PrepareRequest) {
	if req.fromTraffic {
		return
	}
	ev := req.RecordEvent
	if len(ev) == 0 {
		ev = json.RawMessage("null")
	}
	if err := a.s.db.PutPrepareEvent(context.WithoutCancel(ctx), warm, ev); err != nil {
		a.s.log.Warn("record input not kept; refreshes of its working sets need traffic", "snapshot", warm, "err", err)
	}
}
