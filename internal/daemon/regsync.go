package daemon

import (
	"context"
	"sync"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/wire"
)

// The snapshot registry is the regsync component (push, pull, trust,
// collection, refresh, lazy snapshots); this file is its wiring: what it
// needs of the daemon, and the operations that run it.

// Defaults of the registry settings (regsync's).
const (
	DefaultChunkCacheBudget = regsync.DefaultChunkCacheBudget
	DefaultGCGrace          = regsync.DefaultGCGrace
	DefaultRegistryRefresh  = regsync.DefaultRegistryRefresh
)

// openRegistry loads the node's signing key and opens the registry
// component (the registry and chunk cache when the config names one).
func (s *Service) openRegistry() error {
	c := s.cfg
	var err error
	s.reg, err = regsync.New(regsync.Config{DataDir: c.DataDir, SnapshotsDir: s.snapshotsDir(), Registry: c.Registry,
		ChunkCacheBudget: c.ChunkCacheBudget, TrustedKeys: c.RegistryTrustedKeys, PushOnPrepare: c.RegistryPushOnPrepare,
		NoImport: c.NoRegistryImport, LazyReadahead: c.LazyReadahead, GCGrace: c.RegistryGCGrace,
		GCInterval: c.RegistryGCInterval, RefreshInterval: c.RegistryRefresh},
		regsync.Deps{Log: s.log, Catalog: s.db, Metrics: s.metrics, Progress: report,
			Snapshots: func() regsync.Snapshots { return s.snaps }, Functions: func() regsync.Functions { return s.functions },
			CheckSnapshotID: func(id string) error { return validID("snapshot", id) }, CheckName: ValidName,
			Verified: func(ctx context.Context, id string) (*catalog.Snapshot, *catalog.Function, error) {
				v, err := s.verified(ctx, id, false)
				if err != nil {
					return nil, nil, err
				}
				return v.Sn, v.Fn, nil
			},
			NewestSnapshot: func(ctx context.Context, function string, version int) (string, error) {
				return s.versions.NewestSnapshotOf(ctx, function, version)
			},
			SnapshotBody: SnapshotBody, Forget: s.lifecycle.Forget,
			BuildInputs: func(fn *catalog.Function) any { return s.buildInputs(fn) },
			HoldLayers:  func() func() { return s.functions.Deps().Begin() },
			ReleaseOutdated: func(function string) {
				s.pool.EvictWhere(func(k *kept) bool { return k.Fn.Name == function }, "function outdated")
				s.vmmPool.DropWhere(func(sb *standby) bool { return sb.VM.Fn.Name == function }, whyStandbyGone)
			},
			Running: func(ctx context.Context, function string) (*catalog.VM, error) {
				return s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Function == function })
			}})
	return err
}

// registryErr maps the registry's errors to the service's.
func registryErr(err error) error { return regsync.Err(err) }

// StartPush pushes a snapshot as an operation (PushSnapshot).
func (s *Service) StartPush(ctx context.Context, id string) (*Operation, error) {
	target, err := s.reg.PushTarget(ctx, id)
	return startChecked(s, ctx, wire.OpPush, target, err, s.PushSnapshot, id, func(res *wire.PushResult) *wire.OperationResult {
		return &wire.OperationResult{Push: res}
	})
}

// StartPull pulls a snapshot as an operation (PullSnapshot).
func (s *Service) StartPull(ctx context.Context, req wire.PullRequest) (*Operation, error) {
	target, err := s.reg.PullTarget(req)
	return startChecked(s, ctx, wire.OpPull, target, err, s.PullSnapshot, req, func(res *wire.PullResult) *wire.OperationResult {
		return &wire.OperationResult{Pull: res}
	})
}

// StartGC runs CollectRegistry as an operation.
func (s *Service) StartGC(ctx context.Context, req wire.GCRequest) (*Operation, error) {
	target, err := s.reg.GCTarget(req)
	return startChecked(s, ctx, wire.OpGC, target, err, s.CollectRegistry, req, func(res *wire.GCResult) *wire.OperationResult {
		return &wire.OperationResult{GC: res}
	})
}

// startChecked is startCall on target once the request's check passed
// (checkErr nil); a check that failed is the answer.
func startChecked[A, T any](s *Service, ctx context.Context, kind, target string, checkErr error,
	call func(context.Context, A) (T, error), arg A, result func(T) *wire.OperationResult) (*Operation, error) {
	if checkErr != nil {
		return nil, checkErr
	}
	return startCall(s, ctx, kind, target, call, arg, result)
}

// autoPush pushes a prepared function's warm snapshot when the daemon is
// configured to (regsync.Sync.AutoPush).
func (s *Service) autoPush(ctx context.Context, id string) { s.reg.AutoPush(ctx, id) }

// fnGate is a function's cold-start gate (regsync.Sync.Gate).
func (s *Service) fnGate(name string) *sync.RWMutex { return s.reg.Gate(name) }

// The registry's API on the service (regsync's; forwarded rather than
// embedded, so a method value taken of a nil *Service, as the API's route
// table does, stays valid).

// PushSnapshot uploads a snapshot to the registry (regsync.Sync.PushSnapshot).
func (s *Service) PushSnapshot(ctx context.Context, id string) (*wire.PushResult, error) {
	return s.reg.PushSnapshot(ctx, id)
}

// PullSnapshot fetches a snapshot from the registry (regsync.Sync.PullSnapshot).
func (s *Service) PullSnapshot(ctx context.Context, req wire.PullRequest) (*wire.PullResult, error) {
	return s.reg.PullSnapshot(ctx, req)
}

// ListRegistrySnapshots lists the snapshots in the registry, newest first.
func (s *Service) ListRegistrySnapshots(ctx context.Context) ([]wire.RegistrySnapshot, error) {
	return s.reg.ListRegistrySnapshots(ctx)
}

// DeleteRegistrySnapshot removes a snapshot from the registry.
func (s *Service) DeleteRegistrySnapshot(ctx context.Context, id string) error {
	return s.reg.DeleteRegistrySnapshot(ctx, id)
}

// CollectRegistry deletes the registry's unreferenced objects older than
// the grace (regsync.Sync.CollectRegistry).
func (s *Service) CollectRegistry(ctx context.Context, req wire.GCRequest) (*wire.GCResult, error) {
	return s.reg.CollectRegistry(ctx, req)
}

// RefreshFunctions replaces the functions here published again elsewhere
// (regsync.Sync.RefreshFunctions).
func (s *Service) RefreshFunctions(ctx context.Context) ([]string, error) {
	return s.reg.RefreshFunctions(ctx)
}

// RegistryKey is the node's public signing key.
func (s *Service) RegistryKey() signing.PublicKey { return s.reg.RegistryKey() }

// ChunkCache is the node's chunk cache (nil without a registry).
func (s *Service) ChunkCache() *registry.Cache { return s.reg.ChunkCache() }
