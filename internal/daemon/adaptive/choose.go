package adaptive

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// The cold path's side of the adaptive restore: the strategy of a cold
// start that names none (Settle, Decide), and the one a ready clone's fill
// restores with (Current).

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

// ColdRequest is what of a cold start's request the choice reads.
type ColdRequest struct {
	Strategy string // the strategy the request names, if any
	Snapshot string // the snapshot the request names, if any
}

// AutoChoice is a cold start whose strategy the policy is to decide.
type AutoChoice struct {
	snapID, loc, rule string
	arms              []string
	sn                *catalog.Snapshot
	fn                *catalog.Function
}

// Settle picks the strategy of a cold start up to the policy's decision:
// the request's, else the function's fixed one, else, under auto and for
// requests that name no snapshot, the policy's (Decide). It returns the
// strategy and why when it is fixed (the request's, the function's, the
// daemon's), else the auto choice to decide, which nothing has recorded
// yet (a request a ready clone serves restores nothing and is no cold
// start).
func (m *Manager) Settle(ctx context.Context, req ColdRequest, snapID string, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice, *AutoChoice) {
	if req.Strategy != "" {
		return st, &wire.StrategyChoice{How: "request"}, nil
	}
	sn, err := m.deps.GetSnapshot(ctx, snapID)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	}
	fn, err := m.deps.Catalog.GetFunction(ctx, sn.Function)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	}
	set := m.settingsOf(ctx, fn)
	switch {
	case set.strategy == "", set.strategyFrom == "daemon" && set.strategy != wire.StrategyAuto && sn.RemoteMemory:
		// The daemon's fixed default; snapshots in the registry restore
		// with its remote strategy, as the daemon chose.
		return st, &wire.StrategyChoice{How: "daemon"}, nil
	case set.strategy != wire.StrategyAuto:
		fixed, err := m.deps.Strategy(set.strategy)
		if err != nil { // not offered by this daemon: its default
			return st, &wire.StrategyChoice{How: "daemon", Reason: err.Error()}, nil
		}
		return fixed, &wire.StrategyChoice{How: set.strategyFrom}, nil
	case req.Snapshot != "": // a snapshot named: the evidence is the version's newest's
		return st, &wire.StrategyChoice{How: "daemon", Reason: "a named snapshot restores with the daemon's default"}, nil
	}
	loc, arms, rule, err := m.arms(sn)
	if err != nil || len(arms) == 0 {
		return st, &wire.StrategyChoice{How: "daemon", Reason: fmt.Sprintf("no strategy can restore %s: %v", snapID, err)}, nil
	}
	return st, nil, &AutoChoice{snapID: snapID, loc: loc, rule: rule, arms: arms, sn: sn, fn: fn}
}

// Decide is the policy's choice for c, counted as a cold start of its
// location; st if the strategy chosen is not offered.
func (m *Manager) Decide(ctx context.Context, c *AutoChoice, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice) {
	queueing := m.deps.Queued() > 0
	m.mu.Lock()
	vs := m.state(ctx, c.fn, max(c.sn.Version, 0))
	l := vs.location(c.loc)
	if l.Snapshot != c.snapID {
		l.Reset(c.snapID)
	}
	d := l.Decide(policy.Options{Arms: c.arms, Rule: c.rule, Queueing: queueing, Now: time.Now(), Rand: m.rng})
	m.mu.Unlock()
	m.deps.Metrics.RestoreChoice(d.Strategy, c.loc, d.How)
	chosen, err := m.deps.Strategy(d.Strategy)
	if err != nil {
		return st, &wire.StrategyChoice{How: "daemon", Reason: err.Error()}
	}
	return chosen, &wire.StrategyChoice{How: d.How, Reason: d.Reason}
}

// Current is the strategy auto restores snapshot snapID with now, read
// without deciding (nothing is counted): its location's current choice,
// else its rule's first; a ready clone's fill restores with it.
func (m *Manager) Current(ctx context.Context, snapID string) (restore.Strategy, error) {
	sn, err := m.deps.GetSnapshot(ctx, snapID)
	if err != nil {
		return restore.Strategy{}, err
	}
	fn, err := m.deps.Catalog.GetFunction(ctx, sn.Function)
	if err != nil {
		return restore.Strategy{}, err
	}
	loc, arms, _, err := m.arms(sn)
	if err != nil {
		return restore.Strategy{}, err
	}
	if len(arms) == 0 {
		return restore.Strategy{}, fmt.Errorf("%w: no strategy can restore snapshot %s", errdefs.ErrSnapshotUnusable, snapID)
	}
	pick := arms[0]
	m.mu.Lock()
	if l := m.state(ctx, fn, max(sn.Version, 0)).Locations[loc]; l != nil && l.Snapshot == snapID && slices.Contains(arms, l.Choice) {
		pick = l.Choice
	}
	m.mu.Unlock()
	return m.deps.Strategy(pick)
}

// arms are the strategies auto may choose for sn, in its location's order
// of preference: those the daemon offers, that restore the snapshot where
// its memory is (lazily from the registry, or from the local file) and
// whose artifacts exist.
func (m *Manager) arms(sn *catalog.Snapshot) (loc string, arms []string, rule string, err error) {
	man, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		return "", nil, "", err
	}
	snap := restore.Snapshot{Dir: sn.Dir, Manifest: man}
	env := restore.Env{Store: m.deps.Store()}
	order, rule := localOrder(m.deps.Strategies)
	loc = locLocal
	if sn.RemoteMemory {
		loc = locRemote
		remote := m.deps.RemoteStrategy
		order = append([]restore.Kind{remote}, order...) // those that do not restore lazily are skipped below
		rule = fmt.Sprintf("a snapshot in the registry starts with %s (it fetches the least before the guest runs)", remote)
	}
	for _, k := range order {
		if slices.Contains(arms, string(k)) {
			continue
		}
		for _, st := range m.deps.Strategies {
			if st.Kind != k || !st.Auto || sn.RemoteMemory && !st.Lazy || st.Ready != nil && !st.Ready(snap, env) {
				continue
			}
			arms = append(arms, string(k))
		}
	}
	return loc, arms, rule, nil
}
