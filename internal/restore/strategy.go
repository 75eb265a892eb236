package restore

import (
	"context"
	"fmt"
)

// BeginFunc starts a restore of snap: the session that says how guest
// memory is backed and serves it.
type BeginFunc func(ctx context.Context, snap Snapshot, env Env) (Session, error)

// Strategy is one restore strategy, whole: how it restores, whether a
// failure to begin falls back to vanilla, how prepare builds its
// artifacts, and how it describes itself (its artifacts, its stats, its
// build). Adding a strategy is a file with these parts, its line in
// registry and its conformance case (docs/design.md, "Adding a strategy").
type Strategy struct {
	Kind Kind
	// Begin restores a snapshot with the strategy.
	Begin BeginFunc
	// Fallback: if Begin fails (artifacts missing, damaged or built from
	// another memory file), the restore runs as vanilla and says why.
	Fallback bool
	// Record builds the strategy's artifacts during prepare, restoring
	// and invoking through the host; nil for strategies with none.
	Record func(ctx context.Context, h RecordHost, p *Prepare) error
	// Warm: Record runs on the clean snapshot and takes the warm snapshot
	// that the other strategies record on and every cold start restores.
	// Exactly one strategy of those with a Record has it.
	Warm bool
	// Lazy: the strategy restores a snapshot whose memory comes from a
	// MemorySource (Snapshot.Source); the others refuse one with a
	// NeedsLocalError.
	Lazy bool
	// Variants the strategy restores besides itself (Env.Variant).
	Variants []string
	// Finish runs after every strategy's Record, with what they left in
	// the Prepare (faasnap builds its variant from REAP's recording).
	Finish func(p *Prepare) error
	// Auto: the adaptive policy may choose the strategy (cached may not:
	// its page-cache fill is not counted in a cold start, an upper bound
	// for measurements, not a way to restore).
	Auto bool
	// AutoOrder is its place in the adaptive policy's rule for a location
	// without evidence (lower first, as measured: docs/bench/adaptive.md);
	// 0: after the ranked ones, in registry order.
	AutoOrder int
	// Ready says whether the strategy restores snap as itself (its
	// artifacts exist, premap's store copy does); nil: always.
	Ready func(snap Snapshot, env Env) bool
	// Refresh records the strategy's artifacts again on snap, a warm
	// snapshot it has artifacts of, into dir (not its artifact
	// directory: the daemon swaps them in), with the host's record input;
	// nil for strategies without a recorded set.
	Refresh func(ctx context.Context, h RecordHost, snap Snapshot, dir string, o RecordOptions) (RefreshBuild, error)

	// Artifacts are the files of its artifact directory (ArtifactDir).
	// Remote ones stay in the registry on a lazy pull and reach a lazy
	// restore through Snapshot.Remote.
	Artifacts []Artifact
	// StatsPart is the zero value of its own stats (Stats.Part, a struct
	// whose fields' json, unit and desc tags describe them); nil: none.
	StatsPart any
	// BuildPart is the same for its build in a prepare's result.
	BuildPart any
	// UsesStore: its restores map the snapshot's copy in the memory store
	// (a standby of it goes when the copy does).
	UsesStore bool
	// RemoteDefault: the strategy of a cold start that names none when the
	// snapshot's memory is in the registry, unless the daemon is told
	// otherwise. One strategy has it.
	RemoteDefault bool
	// Prefetched lists the memory pages a lazy restore fetches before the
	// guest runs, from the artifacts in dir (runs of [first page, count]);
	// nil for none. The registry's chunk measurements count them.
	Prefetched func(dir string) (pageSize int64, runs [][2]int64, err error)
}

// RefreshBuild is what a Refresh recorded.
type RefreshBuild struct {
	Pages uint64 // pages of the recorded set
	Bytes int64  // its data file's size (0 without one)
}

// Start begins a restore with the strategy, falling back to vanilla where
// the strategy allows it.
func (st Strategy) Start(ctx context.Context, snap Snapshot, env Env) (Session, error) {
	if err := st.CheckVariant(env.Variant); err != nil {
		return nil, err
	}
	if snap.Source != nil {
		if !st.Lazy {
			return nil, &NeedsLocalError{Kind: st.Kind, Snapshot: snapID(snap)}
		}
		if err := checkLazy(snap); err != nil {
			return nil, fmt.Errorf("lazy restore: %w", err)
		}
	}
	s, err := st.Begin(ctx, snap, env)
	if err != nil && st.Fallback && env.Strict {
		return nil, &FallbackRefusedError{Kind: st.Kind, Snapshot: snapID(snap), Cause: err}
	}
	if err != nil && st.Fallback {
		return fallback(st.Kind, snap, env, err)
	}
	return s, err
}

// registry is every built-in strategy, in the order documentation and
// benchmarks use; prepare records the Warm one first, then the others in
// this order. Each is defined in its own file.
var registry = []Strategy{
	vanillaStrategy,
	cachedStrategy,
	reapStrategy,
	faasnapStrategy,
	premapStrategy,
	snapbpfStrategy,
}

// Kinds lists every strategy, in registry order (those Register added
// last).
func Kinds() []Kind {
	sts := Strategies()
	ks := make([]Kind, len(sts))
	for i, st := range sts {
		ks[i] = st.Kind
	}
	return ks
}

// Lookup finds a strategy by kind.
func Lookup(k Kind) (Strategy, bool) {
	for _, st := range Strategies() {
		if st.Kind == k {
			return st, true
		}
	}
	return Strategy{}, false
}

// Strategies returns every strategy (a copy).
func Strategies() []Strategy {
	mu.RLock()
	defer mu.RUnlock()
	return all()
}

// snapID names snap in errors: its manifest's ID, else its directory.
func snapID(snap Snapshot) string {
	if snap.Manifest != nil && snap.Manifest.ID != "" {
		return snap.Manifest.ID
	}
	return snap.Dir
}
