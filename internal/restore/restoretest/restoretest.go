// Package restoretest is the conformance suite every restore strategy
// passes, in-tree or not (like containerd's snapshotter test suite): Suite
// restores a synthetic snapshot through the strategy's real path (Start,
// the session's memory description, the interposer inside a process that
// maps guest memory exactly as QEMU does) and checks that every page read
// through the restored memory equals the memory file's bytes, that writes
// never reach the file, that the strategy's stats are what it describes,
// and that without its artifacts it falls back to vanilla or refuses.
package restoretest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/restore/restoretest/synth"
	"github.com/thaw-dev/thaw/internal/store"
)

// Snapshot is a synthetic snapshot: a memory file of data pages, zero pages
// and holes, a working set of a third of its pages (in "access" order)
// for strategies that build artifacts from one, and a copy in a memory
// store.
type Snapshot struct {
	Snap  restore.Snapshot
	Pages int
	Order []uint64
	Store *store.Store
}

// NewSnapshot builds a synthetic snapshot of pages pages from seed, without
// artifacts.
func NewSnapshot(t testing.TB, pages int, seed int64) *Snapshot {
	t.Helper()
	m := synth.NewMemory(t, pages, seed)
	return &Snapshot{Snap: restore.Snapshot{Dir: m.Dir, Manifest: m.Manifest}, Pages: pages, Order: m.Order, Store: m.Store}
}

// Env is the environment of one restore of s.
func (s *Snapshot) Env(t testing.TB) restore.Env {
	return restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders(), Store: s.Store}
}

// Options tune the suite for a strategy.
type Options struct {
	// Pages are the sizes of the synthetic memory files (default 257,
	// 1000 and 4099 pages).
	Pages []int
	// Build writes the strategy's artifacts for s (from s.Order) into its
	// artifact directory; nil for a strategy without artifacts.
	Build func(t *testing.T, s *Snapshot)
	// Check adds the strategy's own checks of a restore that ran.
	Check func(t *testing.T, s *Snapshot, sess restore.Session)
}

// Suite runs the conformance suite for st: each size restored twice (a VMM
// started for the restore, and one of the VMM pool that maps the memory,
// waits, then reads it), its stats against its description, and a restore
// without its artifacts.
func Suite(t *testing.T, st restore.Strategy, o Options) {
	shim := synth.ShimDir(t)
	if len(o.Pages) == 0 {
		o.Pages = []int{257, 1000, 4099}
	}
	t.Run("describes", func(t *testing.T) { checkDescription(t, st) })
	for _, pages := range o.Pages {
		s := NewSnapshot(t, pages, int64(pages))
		if o.Build != nil {
			o.Build(t, s)
		}
		for _, c := range []struct {
			how   string
			extra []string
		}{{"started", nil}, {"pooled", []string{"--standby", "300"}}} {
			t.Run(fmt.Sprintf("%s/%d_pages", c.how, pages), func(t *testing.T) {
				sess := restoreAs(t, shim, s, st)
				defer sess.Close()
				if res := synth.Check(t, shim, sess.Memory(), c.extra...); res.Pages != pages || res.Mismatches != 0 || res.FileModified {
					t.Fatalf("%s: %+v", st.Kind, res)
				}
				checkStats(t, st, sess.Stats())
				if o.Check != nil {
					o.Check(t, s, sess)
				}
			})
		}
	}
	t.Run("without_artifacts", func(t *testing.T) { withoutArtifacts(t, shim, st) })
}

// restoreAs restores s with st, from a cold page cache, and requires it
// ran as itself.
func restoreAs(t *testing.T, shim string, s *Snapshot, st restore.Strategy) restore.Session {
	t.Helper()
	if err := pagecache.Evict(s.Snap.MemoryPath()); err != nil { // a prefetch must bring the pages back
		t.Fatal(err)
	}
	sess, err := st.Start(context.Background(), s.Snap, s.Env(t))
	if err != nil {
		t.Fatal(err)
	}
	if sess.Kind() != st.Kind || sess.Stats().Fallback != "" {
		sess.Close()
		t.Fatalf("ran as %s: %s", sess.Kind(), sess.Stats().Fallback)
	}
	if st.Ready != nil && !st.Ready(s.Snap, s.Env(t)) {
		t.Errorf("%s restored a snapshot it says it is not ready for", st.Kind)
	}
	return sess
}

// checkDescription: the strategy describes what it reports and keeps.
func checkDescription(t *testing.T, st restore.Strategy) {
	d := st.Describe()
	if d.Kind != string(st.Kind) {
		t.Fatalf("describes itself as %q", d.Kind)
	}
	for _, m := range append(append([]restore.Measure(nil), d.Stats...), d.Prepared...) {
		switch m.Unit {
		case "", "ms", "bytes", "pages", "count":
		default:
			t.Errorf("%s: unit %q", m.Name, m.Unit)
		}
		if m.Description == "" {
			t.Errorf("%s: no description", m.Name)
		}
	}
	for _, a := range st.Artifacts {
		if a.Name == "" || filepath.Base(a.Name) != a.Name || a.Streamed && !a.Remote {
			t.Errorf("artifact %+v: a file name; streamed only if remote", a)
		}
	}
	if len(st.Artifacts) > 0 && st.Ready == nil {
		t.Error("artifacts but no Ready")
	}
}

// checkStats: the session's part is the strategy's own stats, under its
// kind, with only the fields its type describes.
func checkStats(t *testing.T, st restore.Strategy, stats restore.Stats) {
	t.Helper()
	if len(stats.Part) == 0 {
		return
	}
	if st.StatsPart == nil || stats.Kind != string(st.Kind) {
		t.Fatalf("a part of kind %q from %s, which describes none", stats.Kind, st.Kind)
	}
	v := reflect.New(reflect.TypeOf(st.StatsPart)).Interface()
	dec := json.NewDecoder(bytes.NewReader(stats.Part))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("its part %s is not its StatsPart: %v", stats.Part, err)
	}
}

// withoutArtifacts: a snapshot without the strategy's artifacts restores
// as vanilla and says why (Fallback), or is refused; it never restores as
// the strategy.
func withoutArtifacts(t *testing.T, shim string, st restore.Strategy) {
	if st.Ready == nil {
		return // it needs nothing beyond the snapshot
	}
	s := NewSnapshot(t, 300, 5)
	if err := s.Store.Remove(s.Snap.Manifest.ID); err != nil {
		t.Fatal(err)
	}
	if st.Ready(s.Snap, s.Env(t)) {
		t.Fatalf("%s says it is ready without its artifacts", st.Kind)
	}
	sess, err := st.Start(context.Background(), s.Snap, s.Env(t))
	if err != nil {
		if st.Fallback {
			t.Fatalf("%s falls back but refused: %v", st.Kind, err)
		}
		return
	}
	defer sess.Close()
	if sess.Kind() != restore.Vanilla || sess.Stats().Fallback == "" {
		t.Fatalf("ran as %s, fallback %q; want vanilla and why", sess.Kind(), sess.Stats().Fallback)
	}
	if res := synth.Check(t, shim, sess.Memory()); res.Mismatches != 0 || res.FileModified {
		t.Fatalf("fallback restore: %+v", res)
	}
}
