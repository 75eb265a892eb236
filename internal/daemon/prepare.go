package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/invoke"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// Prepare is the snapshots component's (snapshots.Preparer); this file is
// its wiring and the daemon's side of the strategies' record steps.

// PrepareRequest prepares a function for fast cold starts.
type PrepareRequest = snapshots.PrepareRequest

// PrepareResult describes what prepare built.
type PrepareResult = wire.PrepareResult

// newPreparer makes the preparer (in open, once the snapshots and the
// adaptive restore are made).
func (s *Service) newPreparer() *snapshots.Preparer {
	return snapshots.NewPreparer(s.snaps, snapshots.PrepareDeps{Log: s.log, Strategies: s.strategies, SnapBPFObject: s.cfg.SnapBPFObject,
		ConfigOf: func(ctx context.Context, ref string) (*catalog.Function, int, string, error) {
			r, err := ParseRef(ref)
			if err != nil {
				return nil, 0, "", err
			}
			fn, version, err := s.versions.ConfigOf(ctx, r, true)
			return fn, version, r.Function, err
		},
		Boot: s.vms.Boot, Snapshot: s.CreateSnapshot, DeleteVM: s.DeleteVM,
		Host: func(function string, event json.RawMessage, timeout time.Duration) restore.RecordHost {
			return &recordHost{s: s, fn: function, event: event, timeout: timeout}
		},
		KeepEvent: s.adaptive.KeepEvent, AutoPush: s.autoPush, CheckEvent: invoke.CheckEvent, Timeout: s.timeout, Body: SnapshotBody,
		TracePrepare: func(ctx context.Context, function string) (context.Context, func(error)) {
			ctx, sp := s.span(ctx, SpanPrepare, AttrFunction.String(function))
			return ctx, func(err error) { endSpan(sp, err) }
		}})
}

// Prepare boots a VM of the function and takes a clean snapshot, then runs
// every strategy's prepare step in the registry's order, the Warm one
// first: it restores the clean snapshot, records the working set during
// one invocation with the record input and takes the warm snapshot that
// the others record on and every later cold invocation restores
// (FaaSnap's flow, section 4.8, Figure 5).
//
// req.Function is NAME (the version its live alias mainly routes to, or,
// without versions, the function's own configuration), NAME:VERSION or
// NAME:ALIAS; the snapshots belong to that version.
func (s *Service) Prepare(ctx context.Context, req PrepareRequest) (*PrepareResult, error) {
	return s.prep.Prepare(ctx, req)
}

// prepareWith prepares configuration fn of version (Prepare).
func (s *Service) prepareWith(ctx context.Context, req PrepareRequest, timeout time.Duration, fn *catalog.Function, version int) (*PrepareResult, error) {
	return s.prep.PrepareWith(ctx, req, timeout, fn, version)
}

// checkPrepare validates a prepare request (filling defaults) before
// anything boots and returns its per-invocation timeout.
func (s *Service) checkPrepare(ctx context.Context, req *PrepareRequest) (time.Duration, error) {
	return s.prep.Check(ctx, req)
}

// checkPrepareOptions validates a prepare request's options (filling
// defaults) and returns its per-invocation timeout.
func (s *Service) checkPrepareOptions(req *PrepareRequest) (time.Duration, error) {
	return s.prep.CheckOptions(req)
}

// strategySnapshot is the strategies' view of a catalog snapshot.
func (s *Service) strategySnapshot(sn *catalog.Snapshot) (restore.Snapshot, error) {
	return snapshots.StrategySnapshot(sn)
}

// recordHost is the daemon's side of the strategies' prepare steps: VMs
// restored with a step's own session, invoked with the record input.
type recordHost struct {
	s       *Service
	fn      string
	event   json.RawMessage
	timeout time.Duration
}

func (h *recordHost) Restore(ctx context.Context, snap restore.Snapshot, begin restore.BeginFunc) (restore.RecordVM, error) {
	// No secrets: the record VM's memory becomes the warm snapshot.
	row, err := h.s.snapshotRow(ctx, snap.Manifest.ID)
	if err != nil {
		return nil, err
	}
	lv, rec, _, err := h.s.restore(ctx, row, restoreOpts{begin: begin, start: time.Now(), noSecrets: true})
	if err != nil {
		return nil, err
	}
	return &recordVM{h: h, lv: lv, id: rec.ID, ctx: context.WithoutCancel(ctx)}, nil
}

// recordVM is a restored VM held locked by a prepare step until Close.
type recordVM struct {
	h   *recordHost
	lv  *liveVM
	id  string
	ctx context.Context // the restore's, for Close's teardown
}

func (v *recordVM) Invoke(ctx context.Context) error {
	inv := &Invocation{ID: newID("inv-"), Function: v.h.fn, VM: v.id, Mode: "record"}
	if err := v.h.s.invokeLocked(ctx, v.lv, inv, v.h.event, v.h.timeout); err != nil {
		return err
	}
	if !inv.OK {
		return fmt.Errorf("%w: record invocation raised %s: %s", ErrInvalid, inv.Error.Type, inv.Error.Message)
	}
	return nil
}

func (v *recordVM) Snapshot(ctx context.Context) (restore.Snapshot, error) {
	sn, err := v.h.s.snapshotLocked(ctx, v.lv)
	if err != nil {
		return restore.Snapshot{}, err
	}
	return v.h.s.strategySnapshot(sn)
}

func (v *recordVM) Close() {
	if v.lv == nil {
		return
	}
	v.lv.Mu.Unlock()
	_ = v.h.s.DeleteVM(v.ctx, v.id)
	v.lv = nil
}
