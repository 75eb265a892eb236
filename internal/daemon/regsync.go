package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/functions"
	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmnet"
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
	s.reg, err = regsync.New(regsync.Config{DataDir: c.DataDir, Registry: c.Registry, ChunkCacheBudget: c.ChunkCacheBudget,
		TrustedKeys: c.RegistryTrustedKeys, PushOnPrepare: c.RegistryPushOnPrepare, NoImport: c.NoRegistryImport,
		LazyReadahead: c.LazyReadahead, GCGrace: c.RegistryGCGrace},
		regsync.Deps{Log: s.log, Catalog: s.db, Snapshots: syncSnapshots{s}, Functions: syncFunctions{s}, Layers: syncLayers{s},
			VMs: syncVMs{s}, Metrics: s.metrics, Progress: report})
	return err
}

// registryErr maps the registry's errors to the service's.
func registryErr(err error) error { return regsync.Err(err) }

// StartPush pushes a snapshot as an operation (PushSnapshot).
func (s *Service) StartPush(ctx context.Context, id string) (*Operation, error) {
	if err := s.reg.NeedRegistry(); err != nil {
		return nil, err
	}
	if _, err := s.GetSnapshot(ctx, id); err != nil {
		return nil, err
	}
	return s.startOperation(ctx, wire.OpPush, id, func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := s.PushSnapshot(ctx, id)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Push: res}, nil
	})
}

// StartPull pulls a snapshot as an operation (PullSnapshot).
func (s *Service) StartPull(ctx context.Context, req wire.PullRequest) (*Operation, error) {
	if err := s.reg.CheckPull(req); err != nil {
		return nil, err
	}
	target := req.Snapshot
	if target == "" {
		target = req.Function
	}
	return s.startOperation(ctx, wire.OpPull, target, func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := s.PullSnapshot(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{Pull: res}, nil
	})
}

// StartGC runs CollectRegistry as an operation.
func (s *Service) StartGC(ctx context.Context, req wire.GCRequest) (*Operation, error) {
	if err := s.reg.NeedRegistry(); err != nil {
		return nil, err
	}
	if _, err := regsync.CheckGC(req); err != nil {
		return nil, err
	}
	return s.startOperation(ctx, wire.OpGC, s.reg.Registry().Config().Location(), func(ctx context.Context) (*wire.OperationResult, error) {
		res, err := s.CollectRegistry(ctx, req)
		if err != nil {
			return nil, err
		}
		return &wire.OperationResult{GC: res}, nil
	})
}

// autoPush pushes a prepared function's warm snapshot when the daemon is
// configured to; a failure is logged and leaves the prepare's result.
func (s *Service) autoPush(ctx context.Context, id string) {
	if s.reg.Registry() == nil || !s.cfg.RegistryPushOnPrepare {
		return
	}
	if _, err := s.PushSnapshot(subProgress(ctx, "push: "), id); err != nil {
		s.log.Warn("push after prepare failed; the snapshot stays local", "snapshot", id, "err", err)
	}
}

// fnGate is held shared by every cold start that names a function rather
// than a snapshot, and exclusively while an outdated copy of the function
// is removed (regsync's refresh), so a cold start never picks a snapshot
// that is going.
func (s *Service) fnGate(name string) *sync.RWMutex { return keyedLock(s, s.fnGates, name) }

// every runs fn every interval until Close, the first time after a random
// tenth of it (so nodes started together spread their runs); Close
// cancels fn's context.
func (s *Service) every(interval time.Duration, fn func(context.Context)) {
	defer s.wg.Done()
	wait := time.Duration(rand.Int64N(int64(interval)/10 + 1))
	for {
		select {
		case <-s.stop:
			return
		case <-time.After(wait):
		}
		wait = interval
		ctx, cancel := context.WithCancel(context.Background())
		stop := make(chan struct{})
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-stop:
			}
		}()
		fn(ctx)
		close(stop)
		cancel()
	}
}

// syncSnapshots is the daemon's snapshots as regsync sees them.
type syncSnapshots struct{ s *Service }

func (x syncSnapshots) Dir() string             { return x.s.snapshotsDir() }
func (x syncSnapshots) CheckID(id string) error { return validID("snapshot", id) }
func (x syncSnapshots) Get(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return x.s.GetSnapshot(ctx, id)
}

func (x syncSnapshots) Verified(ctx context.Context, id string) (*catalog.Snapshot, *catalog.Function, error) {
	v, err := x.s.verified(ctx, id, false)
	if err != nil {
		return nil, nil, err
	}
	return v.Sn, v.Fn, nil
}

func (x syncSnapshots) Compatible(m *snapshot.Manifest, fn *catalog.Function) error {
	return x.s.snaps.Compatible(m, fn)
}

func (x syncSnapshots) Enter(ctx context.Context, rec *catalog.Snapshot, prepared json.RawMessage) error {
	return x.s.snaps.Enter(ctx, rec, prepared)
}

func (x syncSnapshots) Delete(ctx context.Context, id string) error {
	return x.s.DeleteSnapshot(ctx, id)
}
func (x syncSnapshots) Collect(ctx context.Context, function string, spare ...string) {
	x.s.collectSnapshots(ctx, function, spare...)
}

func (x syncSnapshots) NewestOf(ctx context.Context, function string, version int) (string, error) {
	return x.s.versions.NewestSnapshotOf(ctx, function, version)
}

func (x syncSnapshots) Lock(id string) *sync.Mutex               { return x.s.snaps.Lock(id) }
func (x syncSnapshots) Body(sn *catalog.Snapshot) *wire.Snapshot { return SnapshotBody(sn) }

// syncFunctions is the daemon's functions as regsync sees them.
type syncFunctions struct{ s *Service }

func (x syncFunctions) CheckName(name string) error          { return ValidName(name) }
func (x syncFunctions) Gate(name string) *sync.RWMutex       { return x.s.fnGate(name) }
func (x syncFunctions) BuildInputs(fn *catalog.Function) any { return x.s.buildInputs(fn) }
func (x syncFunctions) Forget(ctx context.Context, name string) error {
	return x.s.lifecycle.Forget(ctx, name)
}

func (x syncFunctions) ScanForSecrets(ctx context.Context, dir, what string) error {
	return x.s.functions.ScanForSecrets(ctx, dir, what)
}

func (x syncFunctions) Create(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error) {
	return x.s.CreateFunction(ctx, specOfRecord(name, rec, code))
}

// Build builds a version's configuration and code from its record beside
// the function's own, entering nothing in the catalog.
func (x syncFunctions) Build(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error) {
	spec := specOfRecord(name, rec, code)
	netw, err := x.s.functions.CheckSpec(&spec)
	if err != nil {
		return nil, err
	}
	staging, err := x.s.functions.StageCode(ctx, spec)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(staging)
	return x.s.functions.BuildFunction(ctx, spec, netw, staging)
}

// specOfRecord is the function spec of a registry record and its code.
func specOfRecord(name string, rec *registry.FunctionRecord, code []byte) FunctionSpec {
	return FunctionSpec{Name: name, Archive: bytes.NewReader(code), MemoryMiB: rec.MemoryMiB,
		VCPUs: rec.VCPUs, Network: vmnet.Policy{Egress: vmnet.Egress(rec.Egress), Services: rec.Services},
		MaxConcurrency: rec.MaxConcurrency, KeepAliveS: rec.KeepAliveS, VMMPool: rec.VMMPool, VMMPoolTTLS: rec.VMMPoolTTLS,
		Env: rec.Env, Secrets: rec.Secrets, Deps: functions.CatalogDeps(rec.Deps)}
}

// syncLayers is the daemon's dependency layers as regsync sees them.
type syncLayers struct{ s *Service }

func (x syncLayers) Pushed(fn *catalog.Function) (*registry.Layer, string, error) {
	return x.s.functions.PushedLayer(fn)
}

func (x syncLayers) Pull(ctx context.Context, rm *registry.RemoteManifest) error {
	return x.s.functions.PullLayer(ctx, rm)
}

func (x syncLayers) Hold() func() { return x.s.functions.Deps().Begin() }

// syncVMs is the daemon's VMs as regsync sees them.
type syncVMs struct{ s *Service }

func (x syncVMs) ReleaseOutdated(function string) {
	x.s.pool.EvictWhere(func(k *kept) bool { return k.Fn.Name == function }, "function outdated")
	x.s.vmmPool.DropWhere(func(sb *standby) bool { return sb.VM.Fn.Name == function }, whyStandbyGone)
}

func (x syncVMs) Running(ctx context.Context, function string) (*catalog.VM, error) {
	return x.s.liveVMWhere(ctx, func(v *catalog.VM) bool { return v.Function == function })
}

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
