package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

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

// RefreshWorkingSets records the sets again and swaps them in, one
// strategy after the other; the first failure stops it (the sets of that
// strategy and the next stay as they were).
func (s *Service) RefreshWorkingSets(ctx context.Context, req RefreshRequest) (*wire.WorkingSetRefresh, error) {
	p, err := s.checkRefresh(ctx, &req)
	if err != nil {
		return nil, err
	}
	return s.adaptive.refreshAsked(ctx, p, "")
}

// StartRefresh is RefreshWorkingSets as an operation.
func (s *Service) StartRefresh(ctx context.Context, req RefreshRequest) (*Operation, error) {
	if _, err := s.checkRefresh(ctx, &req); err != nil {
		return nil, err
	}
	id := make(chan string, 1)
	op, err := s.startOperation(ctx, wire.OpRefresh, req.Function, func(ctx context.Context) (*wire.OperationResult, error) {
		p, err := s.checkRefresh(ctx, &req)
		if err != nil {
			return nil, err
		}
		r, err := s.adaptive.refreshAsked(ctx, p, <-id)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Refresh: r}, nil
	})
	if err != nil {
		return nil, err
	}
	id <- op.ID
	return op, nil
}

// askedRefresh is a checked RefreshRequest.
type askedRefresh struct {
	req      RefreshRequest
	version  int
	snapshot string
	kinds    []restore.Kind
}

// checkRefresh resolves a refresh's version, snapshot and strategies,
// refusing what cannot be refreshed before anything runs.
func (s *Service) checkRefresh(ctx context.Context, req *RefreshRequest) (*askedRefresh, error) {
	if err := checkEvent(req.Event); err != nil {
		return nil, err
	}
	ref, err := ParseRef(req.Function)
	if err != nil {
		return nil, err
	}
	target, err := s.versions.Resolve(ctx, ref)
	if err != nil {
		return nil, err
	}
	snapID, err := s.versions.NewestSnapshotOf(ctx, ref.Function, target.Version)
	if err != nil {
		return nil, err
	}
	sn, err := s.GetSnapshot(ctx, snapID)
	if err != nil {
		return nil, err
	}
	if sn.RemoteMemory {
		return nil, fmt.Errorf("%w: snapshot %s's memory is in the registry: pull it first", ErrConflict, sn.ID)
	}
	snap, err := s.strategySnapshot(sn)
	if err != nil {
		return nil, err
	}
	p := &askedRefresh{req: *req, version: target.Version, snapshot: snapID}
	p.req.Function = ref.Function
	var have []string
	for _, st := range s.strategies {
		if st.Refresh != nil && st.Ready != nil && st.Ready(snap, restore.Env{}) {
			have = append(have, string(st.Kind))
			if len(req.Strategies) == 0 || slices.Contains(req.Strategies, string(st.Kind)) {
				p.kinds = append(p.kinds, st.Kind)
			}
		}
	}
	for _, k := range req.Strategies {
		if !slices.Contains(have, k) {
			return nil, fmt.Errorf("%w: snapshot %s has no recorded set of strategy %q (it has: %s)", ErrInvalid, snapID, k, strings.Join(have, ", "))
		}
	}
	if len(p.kinds) == 0 {
		return nil, fmt.Errorf("%w: snapshot %s has no recorded working set to refresh: prepare %s first", ErrConflict, snapID, req.Function)
	}
	return p, nil
}

// refreshAsked runs an asked refresh and records it in the version's
// document.
func (a *adaptive) refreshAsked(ctx context.Context, p *askedRefresh, op string) (*wire.WorkingSetRefresh, error) {
	fn, err := a.s.db.GetFunction(ctx, p.req.Function)
	if err != nil {
		return nil, err
	}
	k := verKey{fn.Name, p.version}
	a.mu.Lock()
	if a.busy[k] {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: a refresh or prepare of %s:%d is running", ErrConflict, fn.Name, p.version)
	}
	a.busy[k] = true
	a.mu.Unlock()
	defer a.idle(k)
	src := "request"
	rec := wire.WorkingSetRefresh{Operation: op, Snapshot: p.snapshot, Reason: "asked for", Source: src, State: wire.OpRunning, StartedAt: time.Now()}
	if op == "" {
		rec.Operation = "request-" + strconv.FormatInt(rec.StartedAt.UnixNano(), 36)
	}
	for _, kind := range p.kinds {
		rec.Strategies = append(rec.Strategies, string(kind))
	}
	a.record(ctx, fn, p.version, func(vs *restoreState) { vs.Refreshes = appendRefresh(vs.Refreshes, rec) })
	var firstErr error
	for _, kind := range p.kinds {
		plan := refreshPlan{snapshot: p.snapshot, kind: kind, event: p.req.Event}
		set, _, err := a.rerecord(ctx, fn, plan, rec.Operation)
		outcome := "ok"
		if err != nil {
			outcome, firstErr = "failed", fmt.Errorf("%s: %w", kind, err)
		} else {
			rec.Sets = append(rec.Sets, set)
		}
		a.s.metrics.WorkingSetRefresh(string(kind), src, outcome)
		if err != nil {
			break
		}
	}
	rec.EndedAt, rec.State = time.Now(), wire.OpSucceeded
	if firstErr != nil {
		rec.State, rec.Error = wire.OpFailed, firstErr.Error()
	}
	a.record(ctx, fn, p.version, func(vs *restoreState) {
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
