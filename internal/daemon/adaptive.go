package daemon

import (
	"context"
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/wire"
)

// The daemon's side of the adaptive restore (package adaptive): its
// configuration and request types under the daemon's names, the API
// methods it serves, and what it needs of the daemon (adaptiveSeam).

// AdaptiveConfig configures the adaptive restore.
type AdaptiveConfig = adaptive.Config

// Defaults of AdaptiveConfig.
const (
	DefaultPrepareAfter    = adaptive.DefaultPrepareAfter
	DefaultAdaptiveBackoff = adaptive.DefaultBackoff
	DefaultMaxBackground   = adaptive.DefaultMaxBackground
)

// SettingDefault in a request returns a setting to the daemon's default.
const SettingDefault = adaptive.SettingDefault

// RefreshRequest asks for the working sets of a function version's newest
// snapshot to be recorded again now.
type RefreshRequest = adaptive.RefreshRequest

// CheckRestoreSettings validates a function's restore settings ("" or
// "default": the daemon's default) before anything is created.
func CheckRestoreSettings(strategy, refresh string) error {
	return adaptive.CheckRestoreSettings(strategy, refresh)
}

// newAdaptive makes the daemon's adaptive restore.
func newAdaptive(s *Service, cfg AdaptiveConfig) *adaptive.Manager {
	return adaptive.New(cfg, s.adaptiveDeps())
}

// adaptiveDeps is what the adaptive restore needs of s.
func (s *Service) adaptiveDeps() adaptive.Deps {
	seam := adaptiveSeam{s}
	return adaptive.Deps{Catalog: s.db, Lookup: seam, Metrics: s.metrics, Background: seam, Artifacts: seam, Log: s.log,
		Strategies: s.strategies, Strategy: s.strategy, RemoteStrategy: restore.Kind(s.cfg.RemoteStrategy),
		Store: func() *store.Store { return s.snaps.Store() }, Queued: s.adm.Queued, CheckEvent: checkEvent}
}

// SetRestoreSettings changes a function's restore settings (a nil field
// keeps its setting, "" returns it to the daemon's default) and returns
// its restore document.
func (s *Service) SetRestoreSettings(ctx context.Context, name string, req wire.RestoreSettings) (*wire.FunctionRestore, error) {
	return s.adaptive.SetRestoreSettings(ctx, name, req)
}

// FunctionRestore is a function's restore document: its settings and,
// per version with cold starts, the policy's choice and evidence, drift
// and refreshes.
func (s *Service) FunctionRestore(ctx context.Context, name string) (*wire.FunctionRestore, error) {
	return s.adaptive.FunctionRestore(ctx, name)
}

// RestoreDoc is FunctionRestore for a function body (nil when it cannot
// be read: the function is shown without it).
func (s *Service) RestoreDoc(ctx context.Context, name string) *wire.FunctionRestore {
	return s.adaptive.RestoreDoc(ctx, name)
}

// RefreshWorkingSets records the sets again and swaps them in, one
// strategy after the other; the first failure stops it (the sets of that
// strategy and the next stay as they were).
func (s *Service) RefreshWorkingSets(ctx context.Context, req RefreshRequest) (*wire.WorkingSetRefresh, error) {
	return s.adaptive.RefreshWorkingSets(ctx, req)
}

// StartRefresh is RefreshWorkingSets as an operation.
func (s *Service) StartRefresh(ctx context.Context, req RefreshRequest) (*Operation, error) {
	if _, err := s.adaptive.CheckRefresh(ctx, req); err != nil {
		return nil, err
	}
	id := make(chan string, 1)
	op, err := s.startOperation(ctx, wire.OpRefresh, req.Function, func(ctx context.Context) (*wire.OperationResult, error) {
		p, err := s.adaptive.CheckRefresh(ctx, req)
		if err != nil {
			return nil, err
		}
		r, err := s.adaptive.RefreshAsked(ctx, p, <-id)
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

// adaptiveSeam is the daemon as the adaptive restore sees it: its
// lookups (adaptive.Lookup), operations (adaptive.Background) and a
// snapshot's artifacts (adaptive.Artifacts).
type adaptiveSeam struct{ s *Service }

func (a adaptiveSeam) GetFunction(ctx context.Context, name string) (*catalog.Function, error) {
	return a.s.GetFunction(ctx, name)
}

func (a adaptiveSeam) GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return a.s.GetSnapshot(ctx, id)
}

func (a adaptiveSeam) Resolve(ctx context.Context, ref string) (string, int, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return "", 0, err
	}
	target, err := a.s.versions.Resolve(ctx, r)
	if err != nil {
		return "", 0, err
	}
	return r.Function, target.Version, nil
}

func (a adaptiveSeam) NewestSnapshot(ctx context.Context, function string, version int) (string, error) {
	return a.s.versions.NewestSnapshotOf(ctx, function, version)
}

func (a adaptiveSeam) StrategySnapshot(sn *catalog.Snapshot) (restore.Snapshot, error) {
	return a.s.strategySnapshot(sn)
}

func (a adaptiveSeam) StartOperation(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (string, error) {
	op, err := a.s.startOperation(ctx, kind, target, work)
	if err != nil {
		return "", err
	}
	return op.ID, nil
}

func (a adaptiveSeam) Prepare(ctx context.Context, ref string, event json.RawMessage, fromTraffic bool) (*wire.PrepareResult, error) {
	return a.s.Prepare(ctx, PrepareRequest{Function: ref, RecordEvent: event, FromTraffic: fromTraffic})
}

func (a adaptiveSeam) Host(function string, event json.RawMessage) restore.RecordHost {
	return &recordHost{s: a.s, fn: function, event: event, timeout: a.s.cfg.InvokeTimeout}
}

func (a adaptiveSeam) Options() restore.RecordOptions {
	return restore.RecordOptions{SnapBPFObject: a.s.cfg.SnapBPFObject}
}

func (a adaptiveSeam) Staging(snapDir string, kind restore.Kind, op string) string {
	return stagingDir(snapDir, kind, op)
}

func (a adaptiveSeam) Swap(snapDir string, kind restore.Kind, staging string) error {
	return a.s.pins.swapArtifacts(snapDir, kind, staging)
}

// Swapped trusts the new artifacts and drops the standby VMs that hold the
// old set.
func (a adaptiveSeam) Swapped(sn *catalog.Snapshot, kind restore.Kind) {
	trustArtifacts(sn.Dir, kind)
	a.s.dropSnapshotStandby(sn.ID, func(sb *standby) bool { return sb.Key.Kind == kind }, whyStandbyRefreshed)
}

// whyStandbyRefreshed is why standby VMs of a refreshed strategy go: they
// hold the old set.
const whyStandbyRefreshed = "its snapshot's working set was recorded again"

func (a adaptiveSeam) RemoveStaging() (int, error) {
	return removeStaging(a.s.snapshotsDir())
}
