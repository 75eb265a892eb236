// Package regsync is the daemon's snapshot registry component: pushing
// and pulling snapshots, functions and versions (signed, checked against
// the node's trusted keys), the registry's collection, the scheduled
// refresh of functions published again elsewhere, and lazy snapshots,
// whose memory stays in the registry and is read through the chunk cache
// by a restore or pulled whole on demand (docs/design.md, "Snapshot
// registry" and "Lazy remote restore").
//
// What it needs of the rest of the daemon comes in through Deps; it holds
// the registry store, the chunk cache, the node's signing key and the
// shared pulls of lazy snapshots and imports.
package regsync

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// Defaults of the registry settings.
const (
	// DefaultChunkCacheBudget is the chunk cache's default disk budget.
	DefaultChunkCacheBudget = 20 << 30
	// DefaultGCGrace is how old an unreferenced registry object must be
	// before a collection deletes it, unless the request says otherwise.
	DefaultGCGrace = time.Hour
	// DefaultRegistryRefresh is how often a node with a registry compares
	// its functions with the registry's records.
	DefaultRegistryRefresh = time.Minute
)

// Config is the daemon's registry settings.
type Config struct {
	DataDir      string // the node's data directory (signing key, chunk cache)
	SnapshotsDir string // the directory snapshots live in
	// Registry, if set, is the snapshot registry; nil: none configured.
	Registry         *registry.Config
	ChunkCacheBudget int64    // the chunk cache's disk budget in bytes
	TrustedKeys      []string // key lines besides the node's own whose records it accepts
	PushOnPrepare    bool     // a prepare pushes its warm snapshot
	NoImport         bool     // an invocation never imports a missing function
	LazyReadahead    int      // chunks fetched after a missed one by a lazy restore
	GCGrace          time.Duration
	// GCInterval and RefreshInterval are how often Run collects the
	// registry and refreshes outdated functions (0: never).
	GCInterval, RefreshInterval time.Duration
}

// Catalog is what of the catalog the component reads and writes
// (*catalog.DB).
type Catalog interface {
	GetFunction(ctx context.Context, name string) (*catalog.Function, error)
	ListFunctions(ctx context.Context) ([]*catalog.Function, error)
	GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
	ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error)
	PutSnapshot(ctx context.Context, s *catalog.Snapshot) error
	GetVersion(ctx context.Context, function string, number int) (*catalog.Version, error)
	ImportVersion(ctx context.Context, v *catalog.Version, snapshots []string, live string) error
}

// Snapshots is the snapshots component (*snapshots.Manager).
type Snapshots interface {
	// Get is a snapshot by id (errdefs.ErrNotFound).
	Get(ctx context.Context, id string) (*catalog.Snapshot, error)
	// Compatible checks that a snapshot with manifest m restores here
	// with configuration fn.
	Compatible(m *snapshot.Manifest, fn *catalog.Function) error
	// Enter records a snapshot written into the snapshots' directory.
	Enter(ctx context.Context, rec *catalog.Snapshot, prepared json.RawMessage) error
	// Delete removes a snapshot.
	Delete(ctx context.Context, id string) error
	// Collect applies a function's snapshot retention, sparing those named.
	Collect(ctx context.Context, function string, spare ...string)
	// Lock serializes the verification of one snapshot.
	Lock(id string) *sync.Mutex
}

// Functions is the functions component (*functions.Manager), as far as a
// pull creates or builds functions from the registry's records and a push
// or pull moves their dependency layers.
type Functions interface {
	// CreateFromRecord registers function name from a registry record and
	// its code.
	CreateFromRecord(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error)
	// BuildFromRecord builds function name's configuration and code from a
	// record (a version's) beside the function's own, recording nothing.
	BuildFromRecord(ctx context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error)
	// ScanForSecrets refuses a directory holding a secret's value.
	ScanForSecrets(ctx context.Context, dir, what string) error
	// PushedLayer is the layer a function's snapshots push (nil: none)
	// and its file.
	PushedLayer(fn *catalog.Function) (*registry.Layer, string, error)
	// PullLayer fetches the layer a pulled snapshot names, if the node
	// lacks it.
	PullLayer(ctx context.Context, rm *registry.RemoteManifest) error
}

// Metrics counts what the component does (*metrics.Set).
type Metrics interface {
	RegistryGC(outcome string, deleted int64)
	RegistryRefused(kind, reason string)
}

// Deps is what the component needs of the rest of the daemon.
type Deps struct {
	Log     *slog.Logger
	Catalog Catalog
	Metrics Metrics
	// Snapshots and Functions are the components, asked for when used
	// (the daemon makes them after this one).
	Snapshots func() Snapshots
	Functions func() Functions
	// CheckSnapshotID and CheckName check a snapshot id's and a function
	// name's form.
	CheckSnapshotID func(id string) error
	CheckName       func(name string) error
	// Verified is a snapshot and its function, the snapshot verified.
	Verified func(ctx context.Context, id string) (*catalog.Snapshot, *catalog.Function, error)
	// NewestSnapshot is the newest snapshot of a function (of version, if > 0).
	NewestSnapshot func(ctx context.Context, function string, version int) (string, error)
	// SnapshotBody is a snapshot as the API answers it.
	SnapshotBody func(sn *catalog.Snapshot) *wire.Snapshot
	// Forget removes a function the node holds nothing else of.
	Forget func(ctx context.Context, name string) error
	// BuildInputs are what a function's snapshots were built from
	// (recorded with an imported version).
	BuildInputs func(fn *catalog.Function) any
	// HoldLayers keeps the dependency cache from collection until release.
	HoldLayers func() (release func())
	// ReleaseOutdated stops the idle and standby VMs of a function whose
	// copy here is outdated; Running is a live VM of the function, or nil.
	ReleaseOutdated func(function string)
	Running         func(ctx context.Context, function string) (*catalog.VM, error)
	// Progress tells a long operation's reporter where the work is.
	Progress func(ctx context.Context, p wire.OperationProgress)
}

// Sync is the registry component.
type Sync struct {
	cfg      Config
	d        Deps
	log      *slog.Logger
	registry *registry.Store // nil: none configured
	chunks   *registry.Cache // its local chunk cache
	signKey  *signing.Key    // signs what the node pushes
	// completions share the pull of a lazy snapshot's memory; imports the
	// lazy import of a function an invocation found missing.
	completions, imports singleflight.Group
	// gates: function name -> *sync.RWMutex (Gate).
	gates sync.Map
}

// New loads the node's signing key (created at first start) and, when
// cfg names a registry, opens it and the chunk cache.
func New(cfg Config, d Deps) (*Sync, error) {
	if cfg.ChunkCacheBudget == 0 {
		cfg.ChunkCacheBudget = DefaultChunkCacheBudget
	}
	s := &Sync{cfg: cfg, d: d, log: d.Log}
	if err := s.openSigningKey(); err != nil {
		return nil, err
	}
	if err := s.openRegistry(); err != nil {
		return nil, err
	}
	return s, nil
}

// openRegistry opens the registry client and the chunk cache when the
// config names a registry.
func (s *Sync) openRegistry() error {
	if s.cfg.Registry == nil {
		return nil
	}
	st, err := registry.Open(*s.cfg.Registry)
	if err != nil {
		return err
	}
	trust, err := s.registryTrust()
	if err != nil {
		return err
	}
	st = st.WithTrust(trust)
	c, err := registry.OpenCache(filepath.Join(s.cfg.DataDir, "chunks"), s.cfg.ChunkCacheBudget, st)
	if err != nil {
		return err
	}
	s.registry, s.chunks = st, c
	s.log.Info("snapshot registry", "registry", *s.cfg.Registry, "chunk_cache", c.Dir(), "budget_bytes", s.cfg.ChunkCacheBudget,
		"key", s.signKey.Public().ID(), "trusted_keys", trust.Keys.IDs())
	return nil
}

// ChunkCache is the node's chunk cache (nil without a registry): lazy
// restores read remote snapshots through it.
func (s *Sync) ChunkCache() *registry.Cache { return s.chunks }

// Registry is the registry store (nil without one).
func (s *Sync) Registry() *registry.Store { return s.registry }

// RegistryInfo is the registry as GET /v1/info shows it (nil without one).
func (s *Sync) RegistryInfo() *wire.RegistryInfo {
	if s.registry == nil {
		return nil
	}
	cfg, st := s.registry.Config(), s.chunks.Stats()
	return &wire.RegistryInfo{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Path: cfg.Path, Secure: cfg.Secure, ChunkSize: s.registry.ChunkSize(),
		PushOnPrepare: s.cfg.PushOnPrepare, Import: !s.cfg.NoImport,
		CacheDir: s.chunks.Dir(), CacheUsedBytes: st.UsedBytes, CacheBudgetBytes: st.BudgetBytes, TrustedKeys: s.trustedKeyIDs()}
}

// NeedRegistry refuses an operation on a node without a registry.
func (s *Sync) NeedRegistry() error {
	if s.registry == nil {
		return fmt.Errorf("%w: no snapshot registry is configured (thawd --registry-config)", errdefs.ErrConflict)
	}
	return nil
}

// report tells ctx's reporter, if any, where the work is.
func (s *Sync) report(ctx context.Context, p wire.OperationProgress) {
	if s.d.Progress != nil {
		s.d.Progress(ctx, p)
	}
}

// phase reports a phase without counts.
func (s *Sync) phase(ctx context.Context, name string) {
	s.report(ctx, wire.OperationProgress{Phase: name})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// allocated is the bytes a file takes on disk (0 if it is not there).
func allocated(path string) int64 {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return 0
	}
	return st.Blocks * 512
}
