package snapshots

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/progress"
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
	// FromTraffic: RecordEvent is an invocation's (the daemon's own
	// background prepare): used once, never kept.
	FromTraffic bool
}

// PrepareDeps is what prepare needs of the rest of the daemon.
type PrepareDeps struct {
	Log *slog.Logger
	// Strategies are the restore strategies offered; SnapBPFObject the
	// snapbpf capture object their record steps may load.
	Strategies    []restore.Strategy
	SnapBPFObject string
	// ConfigOf resolves a reference (NAME, NAME:VERSION, NAME:ALIAS) to
	// the configuration and version prepared, and the function's name.
	ConfigOf func(ctx context.Context, ref string) (fn *catalog.Function, version int, function string, err error)
	// Boot boots a VM of configuration fn of version; Snapshot snapshots
	// a VM; DeleteVM stops and removes one.
	Boot     func(ctx context.Context, fn *catalog.Function, version int) (*catalog.VM, error)
	Snapshot func(ctx context.Context, vmID string) (*catalog.Snapshot, error)
	DeleteVM func(ctx context.Context, id string) error
	// Host is the daemon's side of the strategies' record steps for
	// function, invoked with event within timeout.
	Host func(function string, event json.RawMessage, timeout time.Duration) restore.RecordHost
	// KeepEvent keeps a warm snapshot's record input for the adaptive
	// restore's later refreshes (not one that came from traffic).
	KeepEvent func(ctx context.Context, warm string, event json.RawMessage, fromTraffic bool)
	// AutoPush pushes a warm snapshot to the registry if the daemon does so.
	AutoPush func(ctx context.Context, id string)
	// CheckEvent checks an invocation input; Timeout an invocation
	// timeout (0: the default).
	CheckEvent func(event json.RawMessage) error
	Timeout    func(d time.Duration) (time.Duration, error)
	// Body is a snapshot as the API answers it.
	Body func(sn *catalog.Snapshot) *wire.Snapshot
	// TracePrepare starts a prepare's span; end ends it with its error.
	TracePrepare func(ctx context.Context, function string) (_ context.Context, end func(error))
}

// Preparer prepares functions: a clean snapshot of a booted VM, then
// every strategy's record step, the warm snapshot first.
type Preparer struct {
	snaps *Manager
	d     PrepareDeps
}

// NewPreparer makes the preparer of the snapshots in snaps.
func NewPreparer(snaps *Manager, d PrepareDeps) *Preparer { return &Preparer{snaps: snaps, d: d} }

// Check validates a prepare request (filling defaults) before anything
// boots and returns its per-invocation timeout.
func (p *Preparer) Check(ctx context.Context, req *PrepareRequest) (time.Duration, error) {
	timeout, err := p.CheckOptions(req)
	if err != nil {
		return 0, err
	}
	_, _, _, err = p.d.ConfigOf(ctx, req.Function)
	return timeout, err
}

// CheckOptions validates a prepare request's options (filling defaults)
// and returns its per-invocation timeout.
func (p *Preparer) CheckOptions(req *PrepareRequest) (time.Duration, error) {
	if req.GroupSize == 0 {
		req.GroupSize = 1024
	}
	if req.MergeGap == 0 {
		req.MergeGap = 32
	}
	if req.GroupSize < 1 || req.GroupSize > 1<<20 || req.MergeGap < 0 || req.MergeGap > 1<<20 {
		return 0, fmt.Errorf("%w: group_size must be 1..1048576 and merge_gap 0..1048576", errdefs.ErrInvalid)
	}
	if err := p.d.CheckEvent(req.RecordEvent); err != nil {
		return 0, err
	}
	if steps := RecordOrder(p.d.Strategies); len(steps) == 0 || !steps[0].Warm {
		return 0, fmt.Errorf("%w: none of this daemon's strategies takes a warm snapshot; there is nothing to prepare", errdefs.ErrConflict)
	}
	return p.d.Timeout(req.Timeout)
}

// Prepare boots a VM of the function and takes a clean snapshot, then runs
// every strategy's prepare step in the registry's order, the Warm one
// first: it restores the clean snapshot, records the working set during
// one invocation with the record input and takes the warm snapshot that
// the others record on and every later cold invocation restores.
// req.Function is a reference; the snapshots belong to its version.
func (p *Preparer) Prepare(ctx context.Context, req PrepareRequest) (*wire.PrepareResult, error) {
	timeout, err := p.Check(ctx, &req)
	if err != nil {
		return nil, err
	}
	fn, version, function, err := p.d.ConfigOf(ctx, req.Function)
	if err != nil {
		return nil, err
	}
	req.Function = function
	return p.PrepareWith(ctx, req, timeout, fn, version)
}

// PrepareWith prepares configuration fn of version (< 0: a deploy's) with
// a request whose options were checked.
func (p *Preparer) PrepareWith(ctx context.Context, req PrepareRequest, timeout time.Duration, fn *catalog.Function, version int) (res *wire.PrepareResult, err error) {
	ctx, end := p.d.TracePrepare(ctx, req.Function)
	defer func() { end(err) }()
	t0 := time.Now()
	res = &wire.PrepareResult{Function: req.Function, Prepared: map[string]*wire.PreparedStrategy{}}
	clean, err := p.clean(ctx, res, fn, version)
	if err != nil {
		return nil, err
	}
	prep := &restore.Prepare{Log: p.d.Log.With("function", req.Function), Result: res,
		Options: restore.RecordOptions{GroupSize: req.GroupSize, MergeGap: req.MergeGap, SnapBPFObject: p.d.SnapBPFObject,
			Variants: req.FaaSnapVariants}}
	if prep.Clean, err = StrategySnapshot(clean); err != nil {
		return nil, err
	}
	if err := p.record(ctx, prep, p.d.Host(req.Function, req.RecordEvent, timeout)); err != nil {
		return nil, err
	}
	if err := p.publish(ctx, res, prep, clean); err != nil {
		return nil, err
	}
	res.Timing.TotalMS = ms(time.Since(t0))
	b, _ := json.Marshal(res)
	if err := p.snaps.d.Catalog.SetSnapshotPrepared(ctx, res.Warm.ID, string(b)); err != nil {
		return nil, err
	}
	p.d.KeepEvent(ctx, res.Warm.ID, req.RecordEvent, req.FromTraffic)
	p.d.Log.Info("prepared", "function", req.Function, "warm", res.Warm.ID, "total_ms", res.Timing.TotalMS)
	p.snaps.Collect(ctx, req.Function)
	if version >= 0 { // a deploy's pushes once its version is published
		p.d.AutoPush(ctx, res.Warm.ID)
	}
	return res, nil
}

// clean boots fn and takes its clean snapshot; the VM goes either way.
func (p *Preparer) clean(ctx context.Context, res *wire.PrepareResult, fn *catalog.Function, version int) (*catalog.Snapshot, error) {
	vm, err := p.d.Boot(progress.Sub(ctx, "boot: "), fn, version)
	if err != nil {
		return nil, err
	}
	res.Timing.BootMS = vm.BootMS
	t := time.Now()
	progress.Phase(ctx, "clean snapshot")
	clean, err := p.d.Snapshot(ctx, vm.ID)
	_ = p.d.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if err != nil {
		return nil, err
	}
	res.Clean = p.d.Body(clean)
	res.Timing.CleanSnapshotMS = ms(time.Since(t))
	return clean, nil
}

// record runs every strategy's record step, the Warm one first, then
// their finishing steps, and seals the result.
func (p *Preparer) record(ctx context.Context, prep *restore.Prepare, host restore.RecordHost) error {
	steps := RecordOrder(p.d.Strategies)
	for i, st := range steps {
		progress.Report(ctx, wire.OperationProgress{Phase: "record " + string(st.Kind), Done: int64(i), Total: int64(len(steps)), Unit: "strategies"})
		if err := st.Record(ctx, host, prep); err != nil {
			return fmt.Errorf("%s record: %w", st.Kind, err)
		}
	}
	if prep.Warm.Manifest == nil {
		return fmt.Errorf("the %s record step took no warm snapshot", steps[0].Kind)
	}
	for _, st := range steps {
		if st.Finish != nil {
			if err := st.Finish(prep); err != nil {
				return fmt.Errorf("%s record: %w", st.Kind, err)
			}
		}
	}
	if err := prep.Seal(); err != nil {
		return err
	}
	progress.Report(ctx, wire.OperationProgress{Phase: "publishing", Done: int64(len(steps)), Total: int64(len(steps)), Unit: "strategies"})
	return nil
}

// publish records the warm snapshot as the clean one's child in res.
func (p *Preparer) publish(ctx context.Context, res *wire.PrepareResult, prep *restore.Prepare, clean *catalog.Snapshot) error {
	warm, err := p.snaps.Get(ctx, prep.Warm.Manifest.ID)
	if err != nil {
		return err
	}
	if err := p.snaps.d.Catalog.SetSnapshotParent(ctx, warm.ID, clean.ID); err != nil {
		return err
	}
	warm.Parent = clean.ID
	res.Warm = p.d.Body(warm)
	return nil
}

// RecordOrder is the strategies with a prepare step, the Warm one first.
func RecordOrder(all []restore.Strategy) []restore.Strategy {
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

// StrategySnapshot is the strategies' view of a catalog snapshot.
func StrategySnapshot(sn *catalog.Snapshot) (restore.Snapshot, error) {
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		return restore.Snapshot{}, err
	}
	return restore.Snapshot{Dir: sn.Dir, Manifest: m}, nil
}
