package adaptive

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// Background work of the adaptive restore, each an operation: a refresh
// records a drifted set again and swaps it in; a prepare builds the
// artifacts of a snapshot that has none. Neither runs on a request's path;
// their record VMs wait for room in admission like any VM.

// startRefresh starts the refresh p of fn's version as an operation.
func (m *Manager) startRefresh(fn *catalog.Function, version int, p refreshPlan) {
	k := verKey{fn.Name, version}
	if !m.claim(k) {
		return // a later drifted cold start asks again
	}
	// The window is counted afresh from here.
	m.record(context.Background(), fn, version, func(vs *restoreState) { delete(vs.Drift, string(p.kind)) })
	src := wire.RefreshPrepare
	if p.event != nil {
		src = wire.RefreshTraffic
	}
	rec := wire.WorkingSetRefresh{Snapshot: p.snapshot, Strategies: []string{string(p.kind)}, Reason: p.reason, Source: src,
		State: wire.OpRunning, StartedAt: time.Now()}
	op, err := m.startBackground(wire.OpRefresh, fn.Name+":"+strconv.Itoa(version)+" "+p.snapshot,
		func(ctx context.Context, op string) (*wire.OperationResult, error) {
			defer m.release(k)
			rec.Operation = op
			done, err := m.refresh(ctx, fn, version, p, rec)
			if err != nil {
				return nil, err
			}
			return &wire.OperationResult{Refresh: &done}, nil
		})
	if err != nil {
		m.release(k)
		m.deps.Log.Warn("working-set refresh not started", "function", fn.Name, "version", version, "err", err)
		return
	}
	m.deps.Log.Info("working-set refresh started", "operation", op, "function", fn.Name, "version", version,
		"snapshot", p.snapshot, "strategy", p.kind, "source", src, "reason", p.reason)
}

func (m *Manager) idle(k verKey) {
	m.mu.Lock()
	delete(m.busy, k)
	m.mu.Unlock()
}

// claim marks background work of k as running, if none is for k and the
// daemon-wide budget (MaxBackground) has room; release ends it.
func (m *Manager) claim(k verKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy[k] || m.background >= m.cfg.MaxBackground {
		return false
	}
	m.busy[k] = true
	m.background++
	return true
}

func (m *Manager) release(k verKey) {
	m.mu.Lock()
	delete(m.busy, k)
	m.background--
	m.mu.Unlock()
}

// refresh records p's set again on its snapshot and swaps it in, keeping
// the version's document up to date; a failure leaves the old artifacts in
// place and says why.
func (m *Manager) refresh(ctx context.Context, fn *catalog.Function, version int, p refreshPlan, rec wire.WorkingSetRefresh) (wire.WorkingSetRefresh, error) {
	m.record(ctx, fn, version, func(vs *restoreState) { vs.Refreshes = appendRefresh(vs.Refreshes, rec) })
	set, held, err := m.rerecord(ctx, fn, p, rec.Operation)
	rec.EndedAt = time.Now()
	outcome := "ok"
	if err != nil {
		rec.State, rec.Error, outcome = wire.OpFailed, err.Error(), "failed"
	} else {
		rec.State, rec.Sets = wire.OpSucceeded, []wire.RefreshedSet{set}
	}
	m.deps.Metrics.WorkingSetRefresh(string(p.kind), rec.Source, outcome)
	m.record(ctx, fn, version, func(vs *restoreState) {
		vs.Refreshes = appendRefresh(vs.Refreshes, rec)
		if err == nil {
			if l := vs.Locations[locLocal]; l != nil && l.Snapshot == p.snapshot {
				l.Forget(string(p.kind)) // measured anew on the new set
			}
		}
		if held != "" {
			if vs.Held == nil {
				vs.Held = map[string]string{}
			}
			vs.Held[string(p.kind)] = held
		}
	})
	if err != nil {
		m.deps.Log.Warn("working-set refresh failed; the old artifacts stay", "function", fn.Name, "snapshot", p.snapshot,
			"strategy", p.kind, "err", err)
		return rec, err
	}
	m.deps.Log.Info("working-set refresh done", "function", fn.Name, "snapshot", p.snapshot, "strategy", p.kind,
		"pages_before", set.PagesBefore, "pages_after", set.PagesAfter)
	return rec, nil
}

// rerecord records p's strategy's set on its snapshot into a staging
// directory and swaps it in; held is set when a refresh with the prepare's
// input recorded the very set it replaced (the inputs differ from it: only
// traffic would help).
func (m *Manager) rerecord(ctx context.Context, fn *catalog.Function, p refreshPlan, op string) (wire.RefreshedSet, string, error) {
	out := wire.RefreshedSet{Strategy: string(p.kind)}
	var st restore.Strategy
	for _, o := range m.deps.Strategies {
		if o.Kind == p.kind {
			st = o
		}
	}
	if st.Refresh == nil {
		return out, "", fmt.Errorf("%w: strategy %s records no set here", errdefs.ErrInvalid, p.kind)
	}
	sn, err := m.deps.GetSnapshot(ctx, p.snapshot)
	if err != nil {
		return out, "", err
	}
	if sn.RemoteMemory {
		return out, "", fmt.Errorf("%w: snapshot %s's memory is in the registry: pull it first", errdefs.ErrConflict, sn.ID)
	}
	event := p.event
	if event == nil {
		if event, err = m.prepareEvent(ctx, sn); err != nil {
			return out, err.Error(), err // held: no refresh with the prepare's input can run
		}
	}
	snap, err := m.deps.StrategySnapshot(sn)
	if err != nil {
		return out, "", err
	}
	before, beforeDigest := setSize(snap, p.kind)
	out.PagesBefore, out.BytesBefore = before.Pages, before.Bytes
	art := m.deps.Artifacts
	staging := art.Staging(sn.Dir, p.kind, op)
	defer os.RemoveAll(staging) // whatever is left there: a failed build, or the old set after the swap
	if err := os.MkdirAll(staging, 0o700); err != nil {
		return out, "", noSpace(err)
	}
	b, err := st.Refresh(ctx, m.deps.RecordHost(fn.Name, event), snap, staging, m.deps.RecordOptions)
	if err != nil {
		return out, "", noSpace(fmt.Errorf("record %s: %w", p.kind, err))
	}
	out.PagesAfter, out.BytesAfter = b.Pages, b.Bytes
	_, afterDigest := setSizeIn(staging, p.kind)
	if err := art.Swap(sn.Dir, p.kind, staging); err != nil {
		return out, "", noSpace(err)
	}
	art.Trust(sn.Dir, p.kind)
	m.deps.DropStandby(sn.ID, p.kind)
	held := ""
	if p.event == nil && beforeDigest != "" && beforeDigest == afterDigest {
		held = "a refresh with the prepare's record input recorded the same set: the inputs differ from it " +
			"(set refresh traffic, or prepare with an input like theirs)"
	}
	return out, held, nil
}

// prepareEvent is the record input sn's artifacts were recorded with: the
// prepare's, or the version's deploy's.
func (m *Manager) prepareEvent(ctx context.Context, sn *catalog.Snapshot) (json.RawMessage, error) {
	if ev, err := m.deps.Catalog.PrepareEvent(ctx, sn.ID); err == nil {
		return ev, nil
	}
	if sn.Version > 0 {
		if v, err := m.deps.Catalog.GetVersion(ctx, sn.Function, sn.Version); err == nil && v.RecordEvent != nil {
			return v.RecordEvent, nil
		}
	}
	return nil, fmt.Errorf("%w: no record input is kept for snapshot %s (prepared by an earlier thaw, or from traffic): "+
		"set the function's refresh to traffic, or prepare it again", errdefs.ErrConflict, sn.ID)
}

// setSize is the size of kind's set of snap and a digest of its manifest.
func setSize(snap restore.Snapshot, kind restore.Kind) (restore.RefreshBuild, string) {
	return setSizeIn(snap.ArtifactDir(kind), kind)
}

// setSizeIn reads the set in dir: its pages, its data file's bytes and its
// manifest's recorded regions (what tells two recordings apart).
func setSizeIn(dir string, kind restore.Kind) (restore.RefreshBuild, string) {
	b, digest, err := restore.ReadSet(dir, kind)
	if err != nil {
		return restore.RefreshBuild{}, ""
	}
	return b, digest
}

// appendRefresh adds or updates (by operation) a refresh, keeping the
// newest maxRefreshes.
func appendRefresh(list []wire.WorkingSetRefresh, r wire.WorkingSetRefresh) []wire.WorkingSetRefresh {
	for i := range list {
		if list[i].Operation == r.Operation && r.Operation != "" {
			list[i] = r
			return list
		}
	}
	list = append(list, r)
	if len(list) > maxRefreshes {
		list = append([]wire.WorkingSetRefresh(nil), list[len(list)-maxRefreshes:]...)
	}
	return list
}

// startPrepare prepares fn's version in the background: its snapshot has
// no artifacts and auto has served PrepareAfter cold starts of it. The
// record input is the version's deploy's, else (refresh traffic) the
// invocation's, used once and not kept, else none (null).
func (m *Manager) startPrepare(fn *catalog.Function, version int, snapshot string, set settings, event json.RawMessage) {
	k := verKey{fn.Name, version}
	if !m.claim(k) {
		return // a later cold start asks again
	}
	ref, ev, fromTraffic := fn.Name, json.RawMessage("null"), false
	if version > 0 {
		ref = fn.Name + ":" + strconv.Itoa(version)
		if v, err := m.deps.Catalog.GetVersion(context.Background(), fn.Name, version); err == nil && v.RecordEvent != nil {
			ev = v.RecordEvent
		}
	}
	if bytes.Equal(ev, []byte("null")) && set.refresh == wire.RefreshTraffic && len(event) > 0 {
		ev, fromTraffic = append(json.RawMessage(nil), event...), true
	}
	rec := &wire.BackgroundPrepare{State: wire.OpRunning, StartedAt: time.Now(),
		Reason: fmt.Sprintf("%d cold starts under auto restored %s, which has no strategy artifacts", m.cfg.PrepareAfter, snapshot)}
	op, err := m.startBackground(wire.OpPrepare, ref, func(ctx context.Context, op string) (*wire.OperationResult, error) {
		defer m.release(k)
		rec.Operation = op
		m.record(ctx, fn, version, func(vs *restoreState) { vs.Prepare = rec })
		res, err := m.deps.Prepare(ctx, ref, ev, fromTraffic)
		done := *rec
		done.EndedAt = time.Now()
		if err != nil {
			done.State, done.Error = wire.OpFailed, err.Error()
		} else {
			done.State, done.Snapshot = wire.OpSucceeded, res.Warm.ID
		}
		m.deps.Metrics.BackgroundPrepare(done.State)
		m.record(ctx, fn, version, func(vs *restoreState) { vs.Prepare, vs.Unprepared = &done, 0 })
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Prepare: res}, nil
	})
	if err != nil {
		m.release(k)
		m.deps.Log.Warn("background prepare not started", "function", ref, "err", err)
		return
	}
	m.deps.Log.Info("background prepare started", "operation", op, "function", ref, "reason", rec.Reason)
}

// startBackground starts work as an operation of kind on target and
// returns its id; work gets the id too.
func (m *Manager) startBackground(kind, target string, work func(ctx context.Context, op string) (*wire.OperationResult, error)) (string, error) {
	id := make(chan string, 1)
	op, err := m.deps.StartOperation(context.Background(), kind, target, func(ctx context.Context) (*wire.OperationResult, error) {
		return work(ctx, <-id)
	})
	if err != nil {
		return "", err
	}
	id <- op
	return op, nil
}

// Recover marks the background work a stopped daemon left running as
// interrupted (saying which artifacts are in place) and removes its
// staging directories.
func (m *Manager) Recover(ctx context.Context) error {
	n, err := m.deps.Artifacts.RemoveStaging()
	if err != nil {
		return err
	}
	if n > 0 {
		m.deps.Log.Info("removed what interrupted working-set refreshes left", "directories", n)
	}
	if _, err := m.deps.Catalog.PruneRestore(ctx); err != nil {
		return err
	}
	fns, err := m.deps.Catalog.ListFunctions(ctx)
	if err != nil {
		return err
	}
	for _, fn := range fns {
		states, err := m.deps.Catalog.RestoreStates(ctx, fn.Name)
		if err != nil {
			return err
		}
		for v := range states {
			m.record(ctx, fn, v, m.interrupted)
		}
	}
	return nil
}

// interrupted marks running background work as interrupted.
func (m *Manager) interrupted(vs *restoreState) {
	now := time.Now()
	for i := range vs.Refreshes {
		r := &vs.Refreshes[i]
		if r.State != wire.OpRunning {
			continue
		}
		r.State, r.EndedAt = "interrupted", now
		r.Error = "the daemon stopped during the refresh; the artifacts in place are whole (the old ones unless the swap was done)"
		if sn, err := m.deps.Catalog.GetSnapshot(context.Background(), r.Snapshot); err == nil && len(r.Strategies) == 1 {
			dir := filepath.Join(sn.Dir, "strategies", r.Strategies[0])
			if b, _, err := restore.ReadSet(dir, restore.Kind(r.Strategies[0])); err == nil {
				r.Error = fmt.Sprintf("the daemon stopped during the refresh; the %s set in place is whole (%d pages)", r.Strategies[0], b.Pages)
			}
		}
	}
	if p := vs.Prepare; p != nil && p.State == wire.OpRunning {
		p.State, p.EndedAt, p.Error = "interrupted", now, "the daemon stopped during the prepare"
	}
}

// noSpace maps a full disk to ErrNoSpace.
func noSpace(err error) error {
	if (errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)) && !errors.Is(err, errdefs.ErrNoSpace) {
		return fmt.Errorf("%w: %v", errdefs.ErrNoSpace, err)
	}
	return err
}
