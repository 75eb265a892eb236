package adaptive

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// RefreshRequest asks for the working sets of a function version's newest
// snapshot to be recorded again now (what a drift does by itself).
type RefreshRequest struct {
	// Function is NAME (the version it resolves to), NAME:VERSION or
	// NAME:ALIAS.
	Function string
	// Event is the record input, used once and never stored; nil: the
	// input the snapshot's prepare recorded with.
	Event json.RawMessage
	// Strategies to refresh; none: every one with a recorded set.
	Strategies []string
}

// AskedRefresh is a checked RefreshRequest.
type AskedRefresh struct {
	req      RefreshRequest
	version  int
	snapshot string
	kinds    []restore.Kind
}

// RefreshWorkingSets records the sets again and swaps them in, one
// strategy after the other; the first failure stops it (the sets of that
// strategy and the next stay as they were).
func (m *Manager) RefreshWorkingSets(ctx context.Context, req RefreshRequest) (*wire.WorkingSetRefresh, error) {
	p, err := m.CheckRefresh(ctx, req)
	if err != nil {
		return nil, err
	}
	return m.RefreshAsked(ctx, p, "")
}

// StartRefresh checks req and runs it as an operation that start begins
// (the daemon's operations, of type Op); the refresh is recorded under the
// operation's id (idOf), which its work waits for.
func StartRefresh[Op any, W ~func(context.Context) (*wire.OperationResult, error)](ctx context.Context, m *Manager,
	req RefreshRequest, start func(ctx context.Context, kind, target string, work W) (Op, error), idOf func(Op) string) (Op, error) {
	var none Op
	if _, err := m.CheckRefresh(ctx, req); err != nil {
		return none, err
	}
	id := make(chan string, 1)
	op, err := start(ctx, wire.OpRefresh, req.Function, W(func(ctx context.Context) (*wire.OperationResult, error) {
		p, err := m.CheckRefresh(ctx, req)
		if err != nil {
			return nil, err
		}
		r, err := m.RefreshAsked(ctx, p, <-id)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Refresh: r}, nil
	}))
	if err != nil {
		return none, err
	}
	id <- idOf(op)
	return op, nil
}

// CheckRefresh resolves a refresh's version, snapshot and strategies,
// refusing what cannot be refreshed before anything runs.
func (m *Manager) CheckRefresh(ctx context.Context, req RefreshRequest) (*AskedRefresh, error) {
	if err := m.deps.CheckEvent(req.Event); err != nil {
		return nil, err
	}
	ref, err := m.deps.ParseRef(req.Function)
	if err != nil {
		return nil, err
	}
	function := ref.Function
	version, err := m.deps.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	snapID, err := m.deps.NewestSnapshot(ctx, function, version)
	if err != nil {
		return nil, err
	}
	sn, err := m.deps.GetSnapshot(ctx, snapID)
	if err != nil {
		return nil, err
	}
	if sn.RemoteMemory {
		return nil, fmt.Errorf("%w: snapshot %s's memory is in the registry: pull it first", errdefs.ErrConflict, sn.ID)
	}
	snap, err := m.deps.StrategySnapshot(sn)
	if err != nil {
		return nil, err
	}
	p := &AskedRefresh{req: req, version: version, snapshot: snapID}
	p.req.Function = function
	var have []string
	for _, st := range m.deps.Strategies {
		if st.Refresh != nil && st.Ready != nil && st.Ready(snap, restore.Env{}) {
			have = append(have, string(st.Kind))
			if len(req.Strategies) == 0 || slices.Contains(req.Strategies, string(st.Kind)) {
				p.kinds = append(p.kinds, st.Kind)
			}
		}
	}
	for _, k := range req.Strategies {
		if !slices.Contains(have, k) {
			return nil, fmt.Errorf("%w: snapshot %s has no recorded set of strategy %q (it has: %s)", errdefs.ErrInvalid, snapID, k, strings.Join(have, ", "))
		}
	}
	if len(p.kinds) == 0 {
		return nil, fmt.Errorf("%w: snapshot %s has no recorded working set to refresh: prepare %s first", errdefs.ErrConflict, snapID, req.Function)
	}
	return p, nil
}

// RefreshAsked runs a checked refresh and records it in the version's
// document; op is the operation running it ("": a request's, named
// after its start).
func (m *Manager) RefreshAsked(ctx context.Context, p *AskedRefresh, op string) (*wire.WorkingSetRefresh, error) {
	fn, err := m.deps.Catalog.GetFunction(ctx, p.req.Function)
	if err != nil {
		return nil, err
	}
	k := verKey{fn.Name, p.version}
	m.mu.Lock()
	if m.busy[k] {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: a refresh or prepare of %s:%d is running", errdefs.ErrConflict, fn.Name, p.version)
	}
	m.busy[k] = true
	m.mu.Unlock()
	defer m.idle(k)
	src := "request"
	rec := wire.WorkingSetRefresh{Operation: op, Snapshot: p.snapshot, Reason: "asked for", Source: src, State: wire.OpRunning, StartedAt: time.Now()}
	if op == "" {
		rec.Operation = "request-" + strconv.FormatInt(rec.StartedAt.UnixNano(), 36)
	}
	for _, kind := range p.kinds {
		rec.Strategies = append(rec.Strategies, string(kind))
	}
	m.record(ctx, fn, p.version, func(vs *restoreState) { vs.Refreshes = appendRefresh(vs.Refreshes, rec) })
	var firstErr error
	for _, kind := range p.kinds {
		plan := refreshPlan{snapshot: p.snapshot, kind: kind, event: p.req.Event}
		set, _, err := m.rerecord(ctx, fn, plan, rec.Operation)
		outcome := "ok"
		if err != nil {
			outcome, firstErr = "failed", fmt.Errorf("%s: %w", kind, err)
		} else {
			rec.Sets = append(rec.Sets, set)
		}
		m.deps.Metrics.WorkingSetRefresh(string(kind), src, outcome)
		if err != nil {
			break
		}
	}
	rec.EndedAt, rec.State = time.Now(), wire.OpSucceeded
	if firstErr != nil {
		rec.State, rec.Error = wire.OpFailed, firstErr.Error()
	}
	m.record(ctx, fn, p.version, func(vs *restoreState) {
		vs.Refreshes = appendRefresh(vs.Refreshes, rec)
		for _, s := range rec.Sets {
			if l := vs.Locations[locLocal]; l != nil && l.Snapshot == p.snapshot {
				l.Forget(s.Strategy)
			}
			delete(vs.Drift, s.Strategy)
			delete(vs.Held, s.Strategy)
		}
	})
	if firstErr != nil {
		return &rec, firstErr
	}
	return &rec, nil
}
