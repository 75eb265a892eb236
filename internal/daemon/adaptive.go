package daemon

import (
	"context"
	"encoding/json"

	"github.com/thaw-dev/thaw/internal/daemon/adaptive"
	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// The daemon's side of the adaptive restore (package adaptive): its
// configuration and request types under the daemon's names, the API
// methods it serves, and what it needs of the daemon (its Deps).

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
	return adaptive.New(cfg, adaptive.Deps{Catalog: s.db, Metrics: s.metrics, Artifacts: s.pins, Log: s.log,
		GetFunction: s.GetFunction, GetSnapshot: s.GetSnapshot, ParseRef: ParseRef,
		Resolve: func(ctx context.Context, r versions.Ref) (int, error) {
			target, err := s.versions.Resolve(ctx, r)
			return target.Version, err
		},
		NewestSnapshot: s.versions.NewestSnapshotOf, StrategySnapshot: snapshots.StrategySnapshot,
		StartOperation: func(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (string, error) {
			op, err := s.startOperation(ctx, kind, target, work)
			if err != nil {
				return "", err
			}
			return op.ID, nil
		},
		Prepare: func(ctx context.Context, ref string, event json.RawMessage, fromTraffic bool) (*wire.PrepareResult, error) {
			return s.Prepare(ctx, PrepareRequest{Function: ref, RecordEvent: event, FromTraffic: fromTraffic})
		},
		RecordHost: func(function string, event json.RawMessage) restore.RecordHost {
			return &recordHost{s: s, fn: function, event: event, timeout: s.cfg.InvokeTimeout}
		},
		RecordOptions: restore.RecordOptions{SnapBPFObject: s.cfg.SnapBPFObject},
		DropStandby: func(id string, kind restore.Kind) {
			s.dropSnapshotStandby(id, func(sb *standby) bool { return sb.Key.Kind == kind }, whyStandbyRefreshed)
		},
		Strategies: s.strategies, Strategy: s.strategy, RemoteStrategy: restore.Kind(s.cfg.RemoteStrategy),
		Store: func() *store.Store { return s.snaps.Store() }, Queued: s.adm.Queued, CheckEvent: checkEvent})
}

// whyStandbyRefreshed is why standby VMs of a refreshed strategy go: they
// hold the old set.
const whyStandbyRefreshed = "its snapshot's working set was recorded again"

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
	return adaptive.StartRefresh(ctx, s.adaptive, req, s.startOperation, func(op *Operation) string { return op.ID })
}
