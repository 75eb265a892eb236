package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// The adaptive restore (docs/design.md, "Adaptive restore"): cold starts
// that name no strategy of a function under "auto" restore with the
// strategy package policy picks from the function version's own recent
// cold starts; the sets REAP, FaaSnap and SnapBPF recorded are compared
// with what each restored guest touched, and recorded again when they
// drift; a version whose snapshot has no artifacts is prepared in the
// background. The state lives in the catalog, a document per version.

// AdaptiveConfig configures the adaptive restore.
type AdaptiveConfig struct {
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
	// a version another may start (0: DefaultAdaptiveBackoff).
	Backoff time.Duration
	// MaxBackground bounds the background prepares and refreshes running
	// at once, daemon-wide (0: DefaultMaxBackground); one that would pass
	// it waits for a later cold start to ask again.
	MaxBackground int
}

// Defaults of AdaptiveConfig.
const (
	DefaultPrepareAfter    = 5
	DefaultAdaptiveBackoff = 10 * time.Minute
	DefaultMaxBackground   = 1
	// maxRefreshes is how many refreshes a version's document keeps.
	maxRefreshes = 10
)

// validate reports the configuration's problems.
func (c AdaptiveConfig) validate() []error {
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

func checkStrategySetting(v string) error {
	if v == wire.StrategyAuto {
		return nil
	}
	if _, err := restore.ParseKind(v); err != nil || v == "" {
		return fmt.Errorf("strategy %q: give auto or one of the strategies", v)
	}
	return nil
}

func checkRefreshSetting(v string) error {
	switch v {
	case wire.RefreshPrepare, wire.RefreshTraffic, wire.RefreshOff:
		return nil
	}
	return fmt.Errorf("refresh %q: give prepare, traffic or off", v)
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

// adaptive is the adaptive restore's room in the daemon.
type adaptive struct {
	s    *Service
	cfg  AdaptiveConfig
	pins artifactPins

	mu     sync.Mutex
	states map[verKey]*restoreState // loaded from the catalog on first use
	rng    *rand.Rand
	// busy: versions with a background prepare or refresh running;
	// background counts those the daemon started by itself.
	busy       map[verKey]bool
	background int
}

func newAdaptive(s *Service, cfg AdaptiveConfig) *adaptive {
	if cfg.PrepareAfter == 0 {
		cfg.PrepareAfter = DefaultPrepareAfter
	}
	if cfg.Backoff == 0 {
		cfg.Backoff = DefaultAdaptiveBackoff
	}
	if cfg.MaxBackground == 0 {
		cfg.MaxBackground = DefaultMaxBackground
	}
	return &adaptive{s: s, cfg: cfg, states: map[verKey]*restoreState{}, busy: map[verKey]bool{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
}

// state is fn's version's state (a.mu held), from the catalog the first
// time; one of an earlier function of the name starts afresh.
func (a *adaptive) state(ctx context.Context, fn *catalog.Function, version int) *restoreState {
	k := verKey{fn.Name, version}
	if st := a.states[k]; st != nil && st.FunctionCreated.Equal(fn.CreatedAt) {
		return st
	}
	st := &restoreState{}
	if b, err := a.s.db.RestoreState(ctx, fn.Name, version); err == nil {
		if err := json.Unmarshal(b, st); err != nil {
			a.s.log.Warn("adaptive restore state unreadable; starting afresh", "function", fn.Name, "version", version, "err", err)
			st = &restoreState{}
		}
	}
	if !st.FunctionCreated.Equal(fn.CreatedAt) {
		st = &restoreState{}
	}
	st.FunctionCreated = fn.CreatedAt
	a.states[k] = st
	return st
}

// save writes a version's state to the catalog (a.mu held).
func (a *adaptive) save(ctx context.Context, fn string, version int, st *restoreState) {
	b, err := json.Marshal(st)
	if err == nil {
		err = a.s.db.PutRestoreState(context.WithoutCancel(ctx), fn, version, b)
	}
	if err != nil {
		a.s.log.Error("save adaptive restore state", "function", fn, "version", version, "err", err)
	}
}

// settings are a function's restore settings in force.
type settings struct {
	strategy, strategyFrom string
	refresh, refreshFrom   string
}

// settingsOf reads fn's settings, filling in the daemon's defaults.
func (a *adaptive) settingsOf(ctx context.Context, fn *catalog.Function) settings {
	out := settings{strategy: a.cfg.DefaultStrategy, strategyFrom: "daemon", refresh: a.cfg.DefaultRefresh, refreshFrom: "daemon"}
	if out.refresh == "" {
		out.refresh = wire.RefreshOff
	}
	r, err := a.s.db.RestoreSettings(ctx, fn.Name)
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

// SettingDefault in a request returns a setting to the daemon's default.
const SettingDefault = "default"

// CheckRestoreSettings validates a function's restore settings ("" or
// "default": the daemon's default) before anything is created.
func CheckRestoreSettings(strategy, refresh string) error {
	if strategy == SettingDefault {
		strategy = ""
	}
	if refresh == SettingDefault {
		refresh = ""
	}
	if strategy != "" {
		if err := checkStrategySetting(strategy); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	if refresh != "" {
		if err := checkRefreshSetting(refresh); err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
	}
	return nil
}

// SetRestoreSettings changes a function's restore settings (a nil field
// keeps its setting, "" returns it to the daemon's default) and returns
// its restore document.
func (s *Service) SetRestoreSettings(ctx context.Context, name string, req wire.RestoreSettings) (*wire.FunctionRestore, error) {
	var strategy, refresh string
	if req.Strategy != nil {
		strategy = *req.Strategy
	}
	if req.Refresh != nil {
		refresh = *req.Refresh
	}
	if err := CheckRestoreSettings(strategy, refresh); err != nil {
		return nil, err
	}
	strategy, refresh = orDefault(strategy), orDefault(refresh)
	fn, err := s.GetFunction(ctx, name)
	if err != nil {
		return nil, err
	}
	r, err := s.db.RestoreSettings(ctx, name)
	if err != nil || !r.FunctionCreated.Equal(fn.CreatedAt) {
		r = &catalog.RestoreSettings{Function: name, FunctionCreated: fn.CreatedAt}
	}
	if req.Strategy != nil {
		r.Strategy = strategy
	}
	if req.Refresh != nil {
		r.Refresh = refresh
	}
	if err := s.db.PutRestoreSettings(ctx, r); err != nil {
		return nil, err
	}
	return s.FunctionRestore(ctx, name)
}

// FunctionRestore is a function's restore document: its settings and,
// per version with cold starts, the policy's choice and evidence, drift
// and refreshes.
func (s *Service) FunctionRestore(ctx context.Context, name string) (*wire.FunctionRestore, error) {
	fn, err := s.GetFunction(ctx, name)
	if err != nil {
		return nil, err
	}
	a := s.adaptive
	set := a.settingsOf(ctx, fn)
	out := &wire.FunctionRestore{Strategy: set.strategy, StrategyFrom: set.strategyFrom, Refresh: set.refresh, RefreshFrom: set.refreshFrom}
	if out.Strategy == "" {
		out.Strategy = string(restore.Default)
	}
	stored, err := s.db.RestoreStates(ctx, name)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for v := range stored {
		st := a.state(ctx, fn, v)
		if len(st.Locations) == 0 && len(st.Refreshes) == 0 && st.Prepare == nil {
			continue
		}
		out.Versions = append(out.Versions, versionBody(v, st))
	}
	sort.Slice(out.Versions, func(i, j int) bool { return out.Versions[i].Version > out.Versions[j].Version })
	return out, nil
}

// versionBody is a version's state as the API shows it.
func versionBody(v int, st *restoreState) wire.RestoreVersion {
	out := wire.RestoreVersion{Version: v, Prepare: st.Prepare}
	for _, loc := range []string{locLocal, locRemote} {
		l := st.Locations[loc]
		if l == nil {
			continue
		}
		rl := wire.RestoreLocation{Location: loc, Snapshot: l.Snapshot, Choice: l.Choice, Reason: l.Reason, ChangedAt: l.ChangedAt,
			ColdStarts: l.ColdStarts, Explorations: l.Explorations, Evidence: []wire.StrategyEvidence{}}
		for _, e := range l.Evidence() {
			rl.Evidence = append(rl.Evidence, wire.StrategyEvidence{Strategy: e.Strategy, Samples: e.Samples,
				MedianTotalMS: e.MedianTotalMS, MedianSetupMS: e.MedianSetupMS, MedianResumeMS: e.MedianResumeMS,
				MedianFaults: e.MedianFaults, MedianBytesRead: e.MedianBytes, LastAt: e.LastAt})
		}
		out.Locations = append(out.Locations, rl)
	}
	kinds := make([]string, 0, len(st.Drift))
	for k := range st.Drift {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		w := st.Drift[k]
		d := wire.DriftState{Strategy: k, ColdStarts: len(w.Ratios), Drifted: w.Drifted(), Held: st.Held[k]}
		if n := len(w.Ratios); n > 0 {
			d.LastOutsideRatio = w.Ratios[n-1]
		}
		out.Drift = append(out.Drift, d)
	}
	for i := len(st.Refreshes) - 1; i >= 0; i-- {
		out.Refreshes = append(out.Refreshes, st.Refreshes[i])
	}
	return out
}

// RestoreDoc is FunctionRestore for a function body (nil when it cannot
// be read: the function is shown without it).
func (s *Service) RestoreDoc(ctx context.Context, name string) *wire.FunctionRestore {
	doc, err := s.FunctionRestore(ctx, name)
	if err != nil && !errors.Is(err, ErrNotFound) {
		s.log.Warn("function restore document", "function", name, "err", err)
	}
	return doc
}

// created records a new function's restore settings ("" keeps the
// daemon's default), checked by CreateFunction before anything was made.
func (a *adaptive) created(ctx context.Context, fn *catalog.Function, strategy, refresh string) error {
	strategy, refresh = orDefault(strategy), orDefault(refresh)
	if strategy == "" && refresh == "" {
		return nil
	}
	return a.s.db.PutRestoreSettings(ctx, &catalog.RestoreSettings{Function: fn.Name, FunctionCreated: fn.CreatedAt,
		Strategy: strategy, Refresh: refresh})
}

// orDefault is a setting as kept: "" for the daemon's default.
func orDefault(v string) string {
	if v == SettingDefault {
		return ""
	}
	return v
}
