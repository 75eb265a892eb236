// Package adaptive is the daemon's adaptive restore (docs/design.md,
// "Adaptive restore"): cold starts that name no strategy of a function
// under "auto" restore with the strategy package policy picks from the
// function version's own recent cold starts; the sets REAP, FaaSnap and
// SnapBPF recorded are compared with what each restored guest touched, and
// recorded again when they drift; a version whose snapshot has no
// artifacts is prepared in the background. The state lives in the
// catalog, a document per version. What it needs of the rest of the daemon
// comes in through Deps.
package adaptive

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// Config configures the adaptive restore.
type Config struct {
	// DefaultStrategy is the strategy of functions that set none: "auto",
	// or a strategy's name; "" keeps restore.Default (and the remote
	// strategy for snapshots in the registry).
	DefaultStrategy string
	// DefaultRefresh is the refresh mode of functions that set none:
	// "prepare", "traffic" or "off" ("": off).
	DefaultRefresh string
	// PrepareAfter: a version whose snapshot has no artifacts is prepared
	// in the background after this many of its cold starts under auto
	// (0: DefaultPrepareAfter; negative: never).
	PrepareAfter int
	// Backoff is how long after a failed background prepare or refresh of
	// a version another may start (0: DefaultBackoff).
	Backoff time.Duration
	// MaxBackground bounds the background prepares and refreshes running
	// at once, daemon-wide (0: DefaultMaxBackground); one that would pass
	// it waits for a later cold start to ask again.
	MaxBackground int
}

// Defaults of Config.
const (
	DefaultPrepareAfter  = 5
	DefaultBackoff       = 10 * time.Minute
	DefaultMaxBackground = 1
	// maxRefreshes is how many refreshes a version's document keeps.
	maxRefreshes = 10
)

// Validate reports the configuration's problems.
func (c Config) Validate() []error {
	var errs []error
	if c.DefaultStrategy != "" {
		if err := checkStrategySetting(c.DefaultStrategy); err != nil {
			errs = append(errs, fmt.Errorf("default strategy: %w", err))
		}
	}
	if c.DefaultRefresh != "" {
		if err := checkRefreshSetting(c.DefaultRefresh); err != nil {
			errs = append(errs, fmt.Errorf("default refresh: %w", err))
		}
	}
	if c.Backoff < 0 {
		errs = append(errs, fmt.Errorf("adaptive backoff %s must not be negative", c.Backoff))
	}
	if c.MaxBackground < 0 || c.MaxBackground > 64 {
		errs = append(errs, fmt.Errorf("background operations %d: give 0 (the default, %d) or 1-64", c.MaxBackground, DefaultMaxBackground))
	}
	return errs
}

// Catalog is what the adaptive restore keeps in the catalog (its
// documents, functions' settings, prepares' record inputs) and reads
// there; *catalog.DB is one.
type Catalog interface {
	RestoreSettings(ctx context.Context, function string) (*catalog.RestoreSettings, error)
	PutRestoreSettings(ctx context.Context, r *catalog.RestoreSettings) error
	RestoreState(ctx context.Context, function string, version int) ([]byte, error)
	RestoreStates(ctx context.Context, function string) (map[int][]byte, error)
	PutRestoreState(ctx context.Context, function string, version int, state []byte) error
	PrepareEvent(ctx context.Context, snapshot string) ([]byte, error)
	PutPrepareEvent(ctx context.Context, snapshot string, event []byte) error
	PruneRestore(ctx context.Context) (int64, error)
	GetFunction(ctx context.Context, name string) (*catalog.Function, error)
	ListFunctions(ctx context.Context) ([]*catalog.Function, error)
	GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
	GetVersion(ctx context.Context, function string, number int) (*catalog.Version, error)
}

// Metrics counts the adaptive restore's choices and work; *metrics.Set is
// one.
type Metrics interface {
	RestoreChoice(strategy, location, how string)
	SetUse(strategy string, outsideRatio float64)
	WorkingSetRefresh(strategy, source, outcome string)
	BackgroundPrepare(outcome string)
}

// Artifacts swaps a strategy's recorded set of a snapshot
// (*snapshots.Pins is one).
type Artifacts interface {
	// Staging is where a refresh op builds kind's new artifacts of snapDir.
	Staging(snapDir string, kind restore.Kind, op string) string
	// Swap puts staging's artifacts in place of kind's, never under a
	// restore that is reading them.
	Swap(snapDir string, kind restore.Kind, staging string) error
	// Trust records kind's artifacts of snapDir as verified.
	Trust(snapDir string, kind restore.Kind)
	// RemoveStaging removes what refreshes a stopped daemon left and
	// says how many directories.
	RemoveStaging() (int, error)
}

// Deps is what the adaptive restore needs of the rest of the daemon.
type Deps struct {
	Catalog   Catalog
	Metrics   Metrics
	Artifacts Artifacts
	Log       *slog.Logger
	// GetFunction and GetSnapshot find what a request names, as the
	// daemon's API does (names and ids checked first).
	GetFunction func(ctx context.Context, name string) (*catalog.Function, error)
	GetSnapshot func(ctx context.Context, id string) (*catalog.Snapshot, error)
	// ParseRef reads a reference (NAME, NAME:VERSION, NAME:ALIAS),
	// refusing a malformed one (ErrInvalid); Resolve is the version it runs.
	ParseRef func(ref string) (versions.Ref, error)
	Resolve  func(ctx context.Context, ref versions.Ref) (version int, err error)
	// NewestSnapshot is the newest snapshot of function's version (0: of
	// its snapshots made by hand).
	NewestSnapshot func(ctx context.Context, function string, version int) (string, error)
	// StrategySnapshot is sn as the strategies see it, its manifest read.
	StrategySnapshot func(sn *catalog.Snapshot) (restore.Snapshot, error)
	// StartOperation runs work as the daemon's operation of kind on target
	// and returns its id.
	StartOperation func(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (string, error)
	// Prepare prepares ref (NAME or NAME:VERSION), recording with event;
	// fromTraffic: event is an invocation's, used once and never kept.
	Prepare func(ctx context.Context, ref string, event json.RawMessage, fromTraffic bool) (*wire.PrepareResult, error)
	// RecordHost restores the record VMs of function, invoked with event;
	// RecordOptions are the record steps' options.
	RecordHost    func(function string, event json.RawMessage) restore.RecordHost
	RecordOptions restore.RecordOptions
	// DropStandby stops the standby VMs of a snapshot that hold kind's
	// old set, once a refresh swapped it.
	DropStandby func(snapshot string, kind restore.Kind)
	// Strategies are those the daemon offers; Strategy finds one of them
	// by name, refusing (ErrInvalid) one it does not offer.
	Strategies []restore.Strategy
	Strategy   func(name string) (restore.Strategy, error)
	// RemoteStrategy restores snapshots whose memory is in the registry.
	RemoteStrategy restore.Kind
	// Store is the snapshot memory store (nil: none).
	Store func() *store.Store
	// Queued is how many VM starts wait for room.
	Queued func() int
	// CheckEvent refuses an invocation input the daemon would refuse.
	CheckEvent func(json.RawMessage) error
}

// Locations of a snapshot's memory.
const (
	locLocal  = "local"
	locRemote = "remote"
)

// restoreState is the adaptive restore's document for one function
// version, kept in the catalog.
type restoreState struct {
	// FunctionCreated tells the state of an earlier function of the same
	// name apart (it is dropped).
	FunctionCreated time.Time                   `json:"function_created"`
	Locations       map[string]*policy.Location `json:"locations,omitempty"`
	// Drift windows per strategy, on the local snapshot DriftSnapshot.
	DriftSnapshot string                         `json:"drift_snapshot,omitempty"`
	Drift         map[string]*policy.DriftWindow `json:"drift,omitempty"`
	// Held: strategies whose set is not refreshed again on DriftSnapshot,
	// and why.
	Held      map[string]string        `json:"held,omitempty"`
	Refreshes []wire.WorkingSetRefresh `json:"refreshes,omitempty"` // oldest first
	Prepare   *wire.BackgroundPrepare  `json:"prepare,omitempty"`
	// Unprepared counts cold starts under auto on a local snapshot with
	// no artifacts (a background prepare starts at PrepareAfter).
	Unprepared         int    `json:"unprepared,omitempty"`
	UnpreparedSnapshot string `json:"unprepared_snapshot,omitempty"`
}

func (v *restoreState) location(loc string) *policy.Location {
	if v.Locations == nil {
		v.Locations = map[string]*policy.Location{}
	}
	l := v.Locations[loc]
	if l == nil {
		l = &policy.Location{}
		v.Locations[loc] = l
	}
	return l
}

type verKey struct {
	fn      string
	version int
}

// Manager is the adaptive restore: the versions' documents and the
// background work it runs.
type Manager struct {
	cfg  Config
	deps Deps

	mu     sync.Mutex
	states map[verKey]*restoreState // loaded from the catalog on first use
	rng    *rand.Rand
	// busy: versions with a background prepare or refresh running;
	// background counts those the daemon started by itself.
	busy       map[verKey]bool
	background int
}

// New makes the adaptive restore, filling cfg's zero values with the
// defaults.
func New(cfg Config, deps Deps) *Manager {
	if cfg.PrepareAfter == 0 {
		cfg.PrepareAfter = DefaultPrepareAfter
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = DefaultBackoff
	}
	if cfg.MaxBackground == 0 {
		cfg.MaxBackground = DefaultMaxBackground
	}
	return &Manager{cfg: cfg, deps: deps, states: map[verKey]*restoreState{}, busy: map[verKey]bool{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// state is fn's version's state (m.mu held), from the catalog the first
// time; one of an earlier function of the name starts afresh.
func (m *Manager) state(ctx context.Context, fn *catalog.Function, version int) *restoreState {
	k := verKey{fn.Name, version}
	if st := m.states[k]; st != nil && st.FunctionCreated.Equal(fn.CreatedAt) {
		return st
	}
	st := &restoreState{}
	if b, err := m.deps.Catalog.RestoreState(ctx, fn.Name, version); err == nil {
		if err := json.Unmarshal(b, st); err != nil {
			m.deps.Log.Warn("adaptive restore state unreadable; starting afresh", "function", fn.Name, "version", version, "err", err)
			st = &restoreState{}
		}
	}
	if !st.FunctionCreated.Equal(fn.CreatedAt) {
		st = &restoreState{}
	}
	st.FunctionCreated = fn.CreatedAt
	m.states[k] = st
	return st
}

// save writes a version's state to the catalog (m.mu held).
func (m *Manager) save(ctx context.Context, fn string, version int, st *restoreState) {
	b, err := json.Marshal(st)
	if err == nil {
		err = m.deps.Catalog.PutRestoreState(context.WithoutCancel(ctx), fn, version, b)
	}
	if err != nil {
		m.deps.Log.Error("save adaptive restore state", "function", fn, "version", version, "err", err)
	}
}

// record changes fn's version's state and saves it.
func (m *Manager) record(ctx context.Context, fn *catalog.Function, version int, change func(*restoreState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	vs := m.state(ctx, fn, version)
	change(vs)
	m.save(ctx, fn.Name, version, vs)
}

// Forget drops what is held in memory of function's versions: their next
// use reads their documents from the catalog again.
func (m *Manager) Forget(function string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.states {
		if k.fn == function {
			delete(m.states, k)
		}
	}
}

// settings are a function's restore settings in force.
type settings struct {
	strategy, strategyFrom string
	refresh, refreshFrom   string
}

// settingsOf reads fn's settings, filling in the daemon's defaults.
func (m *Manager) settingsOf(ctx context.Context, fn *catalog.Function) settings {
	out := settings{strategy: m.cfg.DefaultStrategy, strategyFrom: "daemon", refresh: m.cfg.DefaultRefresh, refreshFrom: "daemon"}
	if out.refresh == "" {
		out.refresh = wire.RefreshOff
	}
	r, err := m.deps.Catalog.RestoreSettings(ctx, fn.Name)
	if err != nil || !r.FunctionCreated.Equal(fn.CreatedAt) {
		return out
	}
	if r.Strategy != "" {
		out.strategy, out.strategyFrom = r.Strategy, "function"
	}
	if r.Refresh != "" {
		out.refresh, out.refreshFrom = r.Refresh, "function"
	}
	return out
}
