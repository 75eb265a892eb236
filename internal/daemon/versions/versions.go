// Package versions is the daemon's component for function versions and
// aliases (docs/functions.md): a deploy publishes an immutable, numbered
// version of a function, with snapshots of its own; an alias routes a
// function's traffic to one version, or two by weight; an invocation
// names NAME (the live alias, if the function has one), NAME:3 or
// NAME:ALIAS. A snapshot carries its version's number (0: made by hand,
// -1: a deploy's under way), and restores with that version's frozen
// configuration. The component resolves references, runs deploys,
// applies version retention, rebuilds the versions whose build inputs
// changed and holds what the daemon keeps of versions besides its catalog;
// what it needs of the rest of the daemon (functions' code, VMs,
// snapshots, prepares, operations) comes in through Deps.
package versions

import (
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/wire"
)

// DefaultKeep is how many of a function's newest versions keep their
// snapshots (besides every version an alias routes to).
const DefaultKeep = 5

// Config is the component's settings.
type Config struct {
	// Keep is how many of each function's newest versions keep their
	// snapshots (0: DefaultKeep).
	Keep int
}

// Deps is what the component needs of the rest of the daemon.
type Deps struct {
	Catalog  *catalog.DB
	Log      *slog.Logger
	Metrics  Metrics
	Registry Registry // nil: no registry configured

	// ValidName checks a function name.
	ValidName func(name string) error
	// GetFunction returns a function (checking its name).
	GetFunction func(ctx context.Context, name string) (*catalog.Function, error)
	// PublishVersion enters a deploy's version, its snapshots and the
	// function's new configuration at once (its secrets checked).
	PublishVersion func(ctx context.Context, p catalog.Publish) (*catalog.Version, error)
	// HoldLayers keeps the dependency layers from collection until release
	// is called (which also asks for a collection run).
	HoldLayers func() (release func())

	// Boot boots a VM of fn's configuration for version (-1: a deploy's).
	Boot func(ctx context.Context, fn *catalog.Function, version int) (*catalog.VM, error)
	// CreateSnapshot snapshots a VM; DeleteVM stops and removes one.
	CreateSnapshot func(ctx context.Context, vmID string) (*catalog.Snapshot, error)
	DeleteVM       func(ctx context.Context, id string) error
	// DeleteSnapshot removes a snapshot here (not in the registry).
	DeleteSnapshot func(ctx context.Context, id string) error
	// CheckPrepare checks a prepare's options before a deploy answers;
	// Prepare boots fn for version (-1: a deploy's) and takes its clean
	// and warm snapshots, recording with recordEvent.
	CheckPrepare func(function string, recordEvent json.RawMessage) error
	Prepare      func(ctx context.Context, fn *catalog.Function, version int, recordEvent json.RawMessage) (*wire.PrepareResult, error)
	// AutoPush pushes a snapshot to the registry if the daemon does so.
	AutoPush func(ctx context.Context, id string)
	// BuildInputs is what the daemon builds snapshots from now.
	BuildInputs func() BuildInputs
	// StartOperation runs work in the background as an operation of kind
	// on target (a stale version's rebuild).
	StartOperation func(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) error

	// Phase reports an operation's phase; SubProgress prefixes the
	// phases reported under the context it returns.
	Phase       func(ctx context.Context, name string)
	SubProgress func(ctx context.Context, prefix string) context.Context
	// TraceDeploy starts a deploy's span; end ends it with its error.
	TraceDeploy func(ctx context.Context, function string) (_ context.Context, end func(error))
}

// Metrics counts deploys, collected versions and rebuilds.
type Metrics interface {
	Deploy(outcome string)
	VersionCollected()
	// VersionRebuild counts a stale version snapshotted again, by its
	// reason's label (image, kernel, machine, other).
	VersionRebuild(reason, outcome string)
}

// Registry is the snapshot registry, where retention deletes the copies
// of collected versions.
type Registry interface {
	DeleteSnapshot(ctx context.Context, id string) error
	DeleteVersion(ctx context.Context, function string, number int) error
}

// Manager holds the versions' state besides the catalog.
type Manager struct {
	cfg  Config
	deps Deps
	db   *catalog.DB
	log  *slog.Logger

	mu sync.Mutex
	// pending are the configurations of deploys under way, by the
	// snapshots they made (version -1) until their version is published.
	pending map[string]*catalog.Function
	// deploying serializes the deploys of one function, so they publish
	// in the order they were asked for.
	deploying map[string]*sync.Mutex
	rng       *rand.Rand // weighted routing; guarded by mu
	// stale says why a version's snapshot is out of date, by NAME:VERSION,
	// until its rebuild replaces it.
	stale map[string]string
	// rebuildSlot lets one rebuild run at a time.
	rebuildSlot chan struct{}
}

// New makes the component.
func New(cfg Config, deps Deps) *Manager {
	return &Manager{cfg: cfg, deps: deps, db: deps.Catalog, log: deps.Log,
		pending: map[string]*catalog.Function{}, deploying: map[string]*sync.Mutex{},
		rng:   rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())),
		stale: map[string]string{}, rebuildSlot: make(chan struct{}, 1)}
}

// Keep is how many of a function's newest versions keep their snapshots.
func (m *Manager) Keep() int {
	if m.cfg.Keep == 0 {
		return DefaultKeep
	}
	return m.cfg.Keep
}

func (m *Manager) uniform() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rng.Float64()
}

// deployLock is the lock that orders fn's deploys.
func (m *Manager) deployLock(fn string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	l := m.deploying[fn]
	if l == nil {
		l = &sync.Mutex{}
		m.deploying[fn] = l
	}
	return l
}

// AddPending records the configuration a deploy's snapshot restores with
// until its version is published (or the deploy fails).
func (m *Manager) AddPending(snapshot string, fn *catalog.Function) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending[snapshot] = fn
}

func (m *Manager) forgetPending(snapshots ...string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range snapshots {
		delete(m.pending, id)
	}
}
