package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/versions"
)

// Function versions and aliases (docs/functions.md): a deploy publishes an
// immutable, numbered version of a function, with snapshots of its own; an
// alias routes a function's traffic to one version, or two by weight; an
// invocation names NAME (the live alias, if the function has one), NAME:3
// or NAME:ALIAS. A snapshot carries its version's number (0: made by
// hand), and restores with that version's frozen configuration.

// DefaultVersionKeep is how many of a function's newest versions keep
// their snapshots (besides every version an alias routes to).
const DefaultVersionKeep = 5

// versionState is what the daemon holds for versions besides the catalog.
type versionState struct {
	mu sync.Mutex
	// pending are the configurations of deploys under way, by the
	// snapshots they made (version -1) until their version is published.
	pending map[string]*catalog.Function
	// deploying serializes the deploys of one function, so they publish
	// in the order they were asked for.
	deploying map[string]*sync.Mutex
	rng       *rand.Rand // weighted routing; guarded by mu
	// stale says why a version's snapshot is out of date, by NAME:VERSION,
	// until its rebuild replaces it (stale.go).
	stale map[string]string
	// rebuildSlot lets one rebuild run at a time.
	rebuildSlot chan struct{}
}

func newVersionState() *versionState {
	return &versionState{pending: map[string]*catalog.Function{}, deploying: map[string]*sync.Mutex{},
		rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), stale: map[string]string{}, rebuildSlot: make(chan struct{}, 1)}
}

func (v *versionState) uniform() float64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rng.Float64()
}

// deployLock is the lock that orders fn's deploys.
func (v *versionState) deployLock(fn string) *sync.Mutex {
	v.mu.Lock()
	defer v.mu.Unlock()
	l := v.deploying[fn]
	if l == nil {
		l = &sync.Mutex{}
		v.deploying[fn] = l
	}
	return l
}

// ParseRef reads an invocation's or a command's NAME[:VERSION|:ALIAS].
func ParseRef(s string) (versions.Ref, error) {
	r, err := versions.ParseRef(s)
	if err != nil {
		return r, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := ValidName(r.Function); err != nil {
		return r, err
	}
	return r, nil
}

// snapshotFunction is the configuration a snapshot restores with: its
// version's, frozen at deploy; the function's own for a snapshot made by
// hand; a deploy's under way for its pending snapshots.
func (s *Service) snapshotFunction(ctx context.Context, sn *catalog.Snapshot) (*catalog.Function, error) {
	switch {
	case sn.Version > 0:
		v, err := s.db.GetVersion(ctx, sn.Function, sn.Version)
		if err != nil {
			return nil, err
		}
		fn := v.Config
		return &fn, nil
	case sn.Version < 0:
		s.vers.mu.Lock()
		fn := s.vers.pending[sn.ID]
		s.vers.mu.Unlock()
		if fn == nil {
			return nil, fmt.Errorf("snapshot %s belongs to a deploy that did not finish", sn.ID)
		}
		return fn, nil
	}
	return s.db.GetFunction(ctx, sn.Function)
}

// Target is what an invocation of a reference resolved to.
type Target struct {
	Version int    // 0: the function's unversioned snapshots
	Alias   string // the alias followed, if any
}

// resolve picks the version an invocation of ref runs: the one named, one
// of its alias's routes by weight, or (unqualified) the live alias's if
// the function has one.
func (s *Service) resolve(ctx context.Context, ref versions.Ref) (Target, error) {
	if ref.Version > 0 {
		v, err := s.db.GetVersion(ctx, ref.Function, ref.Version)
		if err != nil {
			return Target{}, s.versionErr(ctx, ref, err)
		}
		if v.Collected {
			return Target{}, fmt.Errorf("%w: version %s was collected (only the newest %d versions and alias targets keep their snapshots); deploy it again", ErrConflict, ref, s.versionKeep())
		}
		return Target{Version: v.Number}, nil
	}
	name := ref.Alias
	if name == "" {
		name = versions.Live
	}
	a, err := s.db.GetAlias(ctx, ref.Function, name)
	if errors.Is(err, catalog.ErrNotFound) && ref.Alias == "" {
		return Target{}, nil // never deployed: its snapshots made by hand
	}
	if err != nil {
		return Target{}, s.versionErr(ctx, ref, err)
	}
	routing, err := aliasRouting(a)
	if err != nil {
		return Target{}, err
	}
	return Target{Version: routing.Pick(s.vers.uniform()), Alias: name}, nil
}

// configOf is the configuration and version a reference boots: a named
// version's; an alias's main version's; unqualified, the function's own
// (version 0) unless followLive and the function has a live alias.
func (s *Service) configOf(ctx context.Context, ref versions.Ref, followLive bool) (*catalog.Function, int, error) {
	if !ref.Qualified() && followLive {
		if _, err := s.db.GetAlias(ctx, ref.Function, versions.Live); err == nil {
			ref.Alias = versions.Live
		}
	}
	if !ref.Qualified() {
		fn, err := s.GetFunction(ctx, ref.Function)
		return fn, 0, err
	}
	n, err := s.resolvePrimary(ctx, ref)
	if err != nil {
		return nil, 0, err
	}
	v, err := s.GetVersion(ctx, ref.Function, n)
	if err != nil {
		return nil, 0, err
	}
	if v.Collected {
		return nil, 0, fmt.Errorf("%w: version %s:%d was collected; deploy it again", ErrConflict, ref.Function, n)
	}
	return &v.Config, v.Number, nil
}

// resolvePrimary is the version a qualified reference names: the version,
// or its alias's main one (the most traffic).
func (s *Service) resolvePrimary(ctx context.Context, ref versions.Ref) (int, error) {
	if ref.Version > 0 {
		return ref.Version, nil
	}
	a, err := s.db.GetAlias(ctx, ref.Function, ref.Alias)
	if err != nil {
		return 0, s.versionErr(ctx, ref, err)
	}
	routing, err := aliasRouting(a)
	if err != nil {
		return 0, err
	}
	return routing.Primary(), nil
}

// versionErr says which of function, version and alias is missing.
func (s *Service) versionErr(ctx context.Context, ref versions.Ref, err error) error {
	if !errors.Is(err, catalog.ErrNotFound) {
		return err
	}
	if _, ferr := s.db.GetFunction(ctx, ref.Function); ferr != nil {
		return ferr
	}
	if ref.Version > 0 {
		return fmt.Errorf("function %q has no version %d: %w", ref.Function, ref.Version, ErrNotFound)
	}
	return fmt.Errorf("function %q has no alias %q: %w", ref.Function, ref.Alias, ErrNotFound)
}

func aliasRouting(a *catalog.Alias) (versions.Routing, error) {
	var r versions.Routing
	if err := json.Unmarshal(a.Routing, &r); err != nil {
		return nil, fmt.Errorf("alias %s:%s: routing: %w", a.Function, a.Name, err)
	}
	if err := r.Check(); err != nil {
		return nil, fmt.Errorf("alias %s:%s: %w", a.Function, a.Name, err)
	}
	return r, nil
}

// newestSnapshotOf is the newest snapshot of function's version (0: of
// the snapshots made by hand).
func (s *Service) newestSnapshotOf(ctx context.Context, function string, version int) (string, error) {
	if _, err := s.GetFunction(ctx, function); err != nil {
		return "", err
	}
	snaps, err := s.db.ListSnapshots(ctx, function)
	if err != nil {
		return "", err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Version == version {
			return snaps[i].ID, nil
		}
	}
	if version > 0 {
		return "", fmt.Errorf("%w: version %d of %q has no snapshot (deleted by hand?); deploy it again", ErrConflict, version, function)
	}
	if vs, _ := s.db.ListVersions(ctx, function); len(vs) > 0 {
		return "", fmt.Errorf("%w: function %q has versions but no %s alias and no snapshot made by hand; invoke %s:VERSION or set the alias (thaw alias set %s %s VERSION)",
			ErrConflict, function, versions.Live, function, function, versions.Live)
	}
	return "", fmt.Errorf("%w: function %q has no snapshot; deploy it (thaw deploy), or boot a VM and snapshot it", ErrConflict, function)
}

// VersionInfo is a version with its newest snapshot and the aliases that
// route to it.
type VersionInfo struct {
	*catalog.Version
	Snapshot string
	Aliases  []string
}

// ListVersions returns a function's versions, oldest first.
func (s *Service) ListVersions(ctx context.Context, function string) ([]*VersionInfo, error) {
	if _, err := s.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	vs, err := s.db.ListVersions(ctx, function)
	if err != nil {
		return nil, err
	}
	return s.versionInfo(ctx, function, vs...)
}

// GetVersion returns one version of a function.
func (s *Service) GetVersion(ctx context.Context, function string, number int) (*catalog.Version, error) {
	v, err := s.db.GetVersion(ctx, function, number)
	if err != nil {
		return nil, s.versionErr(ctx, versions.Ref{Function: function, Version: number}, err)
	}
	return v, nil
}

// GetVersionInfo returns one version of a function with its snapshot and
// aliases.
func (s *Service) GetVersionInfo(ctx context.Context, function string, number int) (*VersionInfo, error) {
	v, err := s.GetVersion(ctx, function, number)
	if err != nil {
		return nil, err
	}
	out, err := s.versionInfo(ctx, function, v)
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

func (s *Service) versionInfo(ctx context.Context, function string, vs ...*catalog.Version) ([]*VersionInfo, error) {
	snaps, err := s.db.ListSnapshots(ctx, function)
	if err != nil {
		return nil, err
	}
	aliases, err := s.db.ListAliases(ctx, function)
	if err != nil {
		return nil, err
	}
	out := make([]*VersionInfo, len(vs))
	for i, v := range vs {
		vi := &VersionInfo{Version: v}
		for _, sn := range snaps { // oldest first: the last is the newest
			if sn.Version == v.Number {
				vi.Snapshot = sn.ID
			}
		}
		for _, a := range aliases {
			if r, err := aliasRouting(a); err == nil && slices.Contains(r.Versions(), v.Number) {
				vi.Aliases = append(vi.Aliases, a.Name)
			}
		}
		out[i] = vi
	}
	return out, nil
}

// ListAliases returns a function's aliases.
func (s *Service) ListAliases(ctx context.Context, function string) ([]*catalog.Alias, error) {
	if _, err := s.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	return s.db.ListAliases(ctx, function)
}

// GetAlias returns one alias of a function.
func (s *Service) GetAlias(ctx context.Context, function, name string) (*catalog.Alias, error) {
	if err := versions.CheckAlias(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	a, err := s.db.GetAlias(ctx, function, name)
	if err != nil {
		return nil, s.versionErr(ctx, versions.Ref{Function: function, Alias: name}, err)
	}
	return a, nil
}

// SetAlias routes an alias of a function to one version, or two by
// weight; it creates the alias if needed.
func (s *Service) SetAlias(ctx context.Context, function, name string, routing versions.Routing) (*catalog.Alias, error) {
	if err := versions.CheckAlias(name); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if err := routing.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if _, err := s.GetFunction(ctx, function); err != nil {
		return nil, err
	}
	b, _ := json.Marshal(routing)
	a, err := s.db.SetAlias(ctx, function, name, b, routing.Versions())
	switch {
	case errors.Is(err, catalog.ErrCollected):
		return nil, fmt.Errorf("%w: %v: its snapshots were collected; deploy it again", ErrConflict, err)
	case err != nil:
		return nil, err
	}
	s.log.Info("alias set", "function", function, "alias", name, "routing", routing.String())
	return a, nil
}

// DeleteAlias removes an alias of a function. live is kept while the
// function has versions: unqualified invocations follow it.
func (s *Service) DeleteAlias(ctx context.Context, function, name string) error {
	if _, err := s.GetAlias(ctx, function, name); err != nil {
		return err
	}
	return s.db.DeleteAlias(ctx, function, name)
}

// RollbackResult says where a rollback moved live from and to.
type RollbackResult struct {
	Function string  `json:"function"`
	From     int     `json:"from"`
	To       int     `json:"to"`
	MS       float64 `json:"ms"`
}

// Rollback moves a function's live alias to version to (0: the version
// live pointed to before, or the newest earlier one with a snapshot). It
// boots nothing: that version's snapshot is still there.
func (s *Service) Rollback(ctx context.Context, function string, to int) (*RollbackResult, error) {
	t0 := time.Now()
	a, err := s.GetAlias(ctx, function, versions.Live)
	if err != nil {
		return nil, err
	}
	routing, err := aliasRouting(a)
	if err != nil {
		return nil, err
	}
	from := routing.Primary()
	if to == 0 {
		ready, err := s.readyVersions(ctx, function)
		if err != nil {
			return nil, err
		}
		if to, err = versions.RollbackTarget(from, a.History, ready); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConflict, err)
		}
	}
	if _, err := s.newestSnapshotOf(ctx, function, to); err != nil {
		if _, verr := s.GetVersion(ctx, function, to); verr != nil {
			return nil, verr
		}
		return nil, err
	}
	if _, err := s.SetAlias(ctx, function, versions.Live, versions.Routing{{Version: to, Weight: versions.MaxWeight}}); err != nil {
		return nil, err
	}
	res := &RollbackResult{Function: function, From: from, To: to, MS: ms(time.Since(t0))}
	s.log.Info("rolled back", "function", function, "from", from, "to", to, "ms", res.MS)
	return res, nil
}

// readyVersions are the versions of function with a snapshot.
func (s *Service) readyVersions(ctx context.Context, function string) ([]int, error) {
	snaps, err := s.db.ListSnapshots(ctx, function)
	if err != nil {
		return nil, err
	}
	seen := map[int]bool{}
	var out []int
	for _, sn := range snaps {
		if sn.Version > 0 && !seen[sn.Version] {
			seen[sn.Version] = true
			out = append(out, sn.Version)
		}
	}
	return out, nil
}

func (s *Service) versionKeep() int {
	if s.cfg.VersionKeep == 0 {
		return DefaultVersionKeep
	}
	return s.cfg.VersionKeep
}
