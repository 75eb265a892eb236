package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// PrepareRequest prepares a function for fast cold starts.
type PrepareRequest struct {
	Function    string
	RecordEvent json.RawMessage // the record input
	GroupSize   int             // FaaSnap working-set group size in pages (default 1024)
	MergeGap    int             // FaaSnap region merge threshold in pages (default 32)
	Timeout     time.Duration   // per record invocation
	// FaaSnapVariants also builds FaaSnap's technique-off artifacts.
	FaaSnapVariants bool
	// fromTraffic: RecordEvent is an invocation's (a background prepare):
	// used once, never kept.
	fromTraffic bool
}

// PrepareResult describes what prepare built.
type PrepareResult = wire.PrepareResult

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
func (s *Service) Prepare(ctx context.Context, req PrepareRequest) (res *PrepareResult, err error) {
	timeout, err := s.checkPrepare(ctx, &req)
	if err != nil {
		return nil, err
	}
	ref, err := ParseRef(req.Function)
	if err != nil {
		return nil, err
	}
	fn, version, err := s.versions.ConfigOf(ctx, ref, true)
	if err != nil {
		return nil, err
	}
	req.Function = ref.Function
	return s.prepareWith(ctx, req, timeout, fn, version)
}

// prepareWith prepares configuration fn of version (Prepare).
func (s *Service) prepareWith(ctx context.Context, req PrepareRequest, timeout time.Duration, fn *catalog.Function, version int) (res *PrepareResult, err error) {
	ctx, sp := s.span(ctx, SpanPrepare, AttrFunction.String(req.Function))
	defer func() { endSpan(sp, err) }()
	t0 := time.Now()
	res = &PrepareResult{Function: req.Function, Prepared: map[string]*wire.PreparedStrategy{}}
	steps := recordOrder(s.strategies)
	vm, err := s.bootFunction(subProgress(ctx, "boot: "), fn, version)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	t := time.Now()
	phase(ctx, "clean snapshot")
	clean, err := s.CreateSnapshot(ctx, vm.ID)
	_ = s.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if err != nil {
		return nil, err
	}
	res.Clean = SnapshotBody(clean)
	res.Timing.CleanSnapshotMS = ms(time.Since(t))

	p := &restore.Prepare{Log: s.log.With("function", req.Function), Result: res,
		Options: restore.RecordOptions{GroupSize: req.GroupSize, MergeGap: req.MergeGap, SnapBPFObject: s.cfg.SnapBPFObject,
			Variants: req.FaaSnapVariants}}
	if p.Clean, err = s.strategySnapshot(clean); err != nil {
		return nil, err
	}
	host := &recordHost{s: s, fn: req.Function, event: req.RecordEvent, timeout: timeout}
	for i, st := range steps {
		report(ctx, wire.OperationProgress{Phase: "record " + string(st.Kind), Done: int64(i), Total: int64(len(steps)), Unit: "strategies"})
		if err := st.Record(ctx, host, p); err != nil {
			return nil, fmt.Errorf("%s record: %w", st.Kind, err)
		}
	}
	if p.Warm.Manifest == nil {
		return nil, fmt.Errorf("the %s record step took no warm snapshot", steps[0].Kind)
	}
	for _, st := range steps {
		if st.Finish != nil {
			if err := st.Finish(p); err != nil {
				return nil, fmt.Errorf("%s record: %w", st.Kind, err)
			}
		}
	}
	if err := p.Seal(); err != nil {
		return nil, err
	}
	report(ctx, wire.OperationProgress{Phase: "publishing", Done: int64(len(steps)), Total: int64(len(steps)), Unit: "strategies"})
	warm, err := s.GetSnapshot(ctx, p.Warm.Manifest.ID)
	if err != nil {
		return nil, err
	}
	if err := s.db.SetSnapshotParent(ctx, warm.ID, clean.ID); err != nil {
		return nil, err
	}
	warm.Parent = clean.ID
	res.Warm = SnapshotBody(warm)
	res.Timing.TotalMS = ms(time.Since(t0))
	b, _ := json.Marshal(res)
	if err := s.db.SetSnapshotPrepared(ctx, res.Warm.ID, string(b)); err != nil {
		return nil, err
	}
	s.adaptive.KeepEvent(ctx, res.Warm.ID, req.RecordEvent, req.fromTraffic)
	s.log.Info("prepared", "function", req.Function, "warm", res.Warm.ID, "total_ms", res.Timing.TotalMS)
	s.collectSnapshots(ctx, req.Function)
	if version >= 0 { // a deploy's pushes once its version is published
		s.autoPush(ctx, res.Warm.ID)
	}
	return res, nil
}

// checkPrepare validates a prepare request (filling defaults) before
// anything boots and returns its per-invocation timeout.
func (s *Service) checkPrepare(ctx context.Context, req *PrepareRequest) (time.Duration, error) {
	timeout, err := s.checkPrepareOptions(req)
	if err != nil {
		return 0, err
	}
	ref, err := ParseRef(req.Function)
	if err != nil {
		return 0, err
	}
	_, _, err = s.versions.ConfigOf(ctx, ref, true)
	return timeout, err
}

// checkPrepareOptions validates a prepare request's options (filling
// defaults) and returns its per-invocation timeout.
func (s *Service) checkPrepareOptions(req *PrepareRequest) (time.Duration, error) {
	if req.GroupSize == 0 {
		req.GroupSize = 1024
	}
	if req.MergeGap == 0 {
		req.MergeGap = 32
	}
	if req.GroupSize < 1 || req.GroupSize > 1<<20 || req.MergeGap < 0 || req.MergeGap > 1<<20 {
		return 0, fmt.Errorf("%w: group_size must be 1..1048576 and merge_gap 0..1048576", ErrInvalid)
	}
	if err := checkEvent(req.RecordEvent); err != nil {
		return 0, err
	}
	if steps := recordOrder(s.strategies); len(steps) == 0 || !steps[0].Warm {
		return 0, fmt.Errorf("%w: none of this daemon's strategies takes a warm snapshot; there is nothing to prepare", ErrConflict)
	}
	return s.timeout(req.Timeout)
}

// recordOrder is the strategies with a prepare step, the Warm one first.
func recordOrder(all []restore.Strategy) []restore.Strategy {
	var warm, rest []restore.Strategy
	for _, st := range all {
		switch {
		case st.Record == nil:
		case st.Warm:
			warm = append(warm, st)
		default:
			rest = append(rest, st)
		}
	}
	return append(warm, rest...)
}

// strategySnapshot is the strategies' view of a catalog snapshot.
func (s *Service) strategySnapshot(sn *catalog.Snapshot) (restore.Snapshot, error) {
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		return restore.Snapshot{}, err
	}
	return restore.Snapshot{Dir: sn.Dir, Manifest: m}, nil
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
