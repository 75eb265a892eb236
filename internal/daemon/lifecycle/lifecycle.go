// Package lifecycle is the daemon's function lifecycle component: the
// claims on function names that keep creates, deploys and deletes of one
// function apart (Names), and deleting a function with everything of it.
// What it needs of the rest of the daemon comes in through Deps.
package lifecycle

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// Config configures the component.
type Config struct {
	// BootTimeout bounds how long a delete waits for the function's VMs
	// that are still starting.
	BootTimeout time.Duration
}

// Catalog is what the component reads and removes of the catalog
// (*catalog.DB).
type Catalog interface {
	GetFunction(ctx context.Context, name string) (*catalog.Function, error)
	DeleteFunction(ctx context.Context, name string) error
	ListVMs(ctx context.Context) ([]*catalog.VM, error)
	GetVM(ctx context.Context, id string) (*catalog.VM, error)
	DeleteVM(ctx context.Context, id string) error
	ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error)
	ListVersions(ctx context.Context, function string) ([]*catalog.Version, error)
	ListAliases(ctx context.Context, function string) ([]*catalog.Alias, error)
	DeleteFunctionVersions(ctx context.Context, function string) error
}

// LiveVM is a VM with a VMM on this host, as a delete sees it.
type LiveVM struct {
	ID         string
	RunDir     string
	Invocation string // the invocation it serves; "" if none
}

// Deps is what the component needs of the rest of the daemon. Every field
// is required.
type Deps struct {
	Catalog Catalog
	Log     *slog.Logger
	// GetFunction returns a function, checking its name.
	GetFunction func(ctx context.Context, name string) (*catalog.Function, error)
	// Live are function's VMs with a VMM; IsLive says whether VM id has one.
	Live   func(function string) []LiveVM
	IsLive func(id string) bool
	// Running is the id of the invocation VM id serves now, "" if none.
	Running func(id string) string
	// Kept are the ids of function's VMs idle in the keep-alive pool.
	Kept func(function string) map[string]bool
	// DropPooled retires function's standby VMs, ready clones and kept VMs.
	DropPooled func(function string)
	// EndVM stops VM id and forgets it, killing what it serves (the
	// invocation fails saying its function was deleted).
	EndVM func(ctx context.Context, id, runDir string) error
	// Gate is function's gate: a cold start of it holds it shared.
	Gate func(function string) *sync.RWMutex
	// Stored says whether snapshot id has a copy in the memory store.
	Stored func(id string) bool
	// DeleteSnapshot deletes a snapshot (pinned too) and its store copy.
	DeleteSnapshot func(ctx context.Context, id string) error
	// KickDepsGC asks for a collection of unused dependency layers.
	KickDepsGC func()
	// ClearStale forgets a version's stale note.
	ClearStale func(function string, version int)
}

// Manager deletes functions and holds the claims on their names.
type Manager struct {
	*Names
	cfg Config
	d   Deps
	log *slog.Logger
}

// New makes the component.
func New(cfg Config, d Deps) *Manager {
	return &Manager{Names: newNames(), cfg: cfg, d: d, log: d.Log}
}
