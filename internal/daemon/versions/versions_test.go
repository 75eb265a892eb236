package versions

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	ver "github.com/thaw-dev/thaw/internal/versions"
)

// References resolve to the version named, an alias's routes by weight,
// or (unqualified) live's; each missing part is named.
func TestResolve(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	h.deploy("app", "code-1")
	h.deploy("app", "code-2")
	if _, err := h.m.SetAlias(ctx, "app", "canary", ver.Routing{{Version: 1, Weight: 50}, {Version: 2, Weight: 50}}); err != nil {
		t.Fatal(err)
	}
	seen := map[int]int{}
	for range 200 {
		tg, err := h.m.Resolve(ctx, ver.Ref{Function: "app", Alias: "canary"})
		if err != nil || tg.Alias != "canary" {
			t.Fatalf("canary: %+v %v", tg, err)
		}
		seen[tg.Version]++
	}
	if seen[1] == 0 || seen[2] == 0 || seen[1]+seen[2] != 200 {
		t.Fatalf("a 50/50 alias routed %v", seen)
	}
	if tg, err := h.m.Resolve(ctx, ver.Ref{Function: "app", Version: 1}); err != nil || tg != (Target{Version: 1}) {
		t.Fatalf("app:1: %+v %v", tg, err)
	}
	for _, tc := range []struct {
		ref  ver.Ref
		kind error
		says string
	}{
		{ver.Ref{Function: "app", Version: 9}, errdefs.ErrNotFound, "no version 9"},
		{ver.Ref{Function: "app", Alias: "beta"}, errdefs.ErrNotFound, `no alias "beta"`},
		{ver.Ref{Function: "gone", Version: 1}, errdefs.ErrNotFound, ""},
	} {
		if _, err := h.m.Resolve(ctx, tc.ref); !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v", tc.ref, err)
		}
	}
	if err := h.db.SetVersionCollected(ctx, "app", 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.Resolve(ctx, ver.Ref{Function: "app", Version: 1}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "newest 5") {
		t.Fatalf("a collected version: %v", err)
	}
	if _, _, err := h.m.ConfigOf(ctx, ver.Ref{Function: "app", Version: 1}, false); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("the configuration of a collected version: %v", err)
	}
}

// A function never deployed runs its snapshots made by hand; ConfigOf
// follows live only when asked.
func TestUnversionedFunction(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	own := &catalog.Function{Name: "app", Digest: "own", CodeDir: "/x/app-1/code", MemoryMiB: 64}
	if err := h.db.PutFunction(ctx, own); err != nil {
		t.Fatal(err)
	}
	if tg, err := h.m.Resolve(ctx, ver.Ref{Function: "app"}); err != nil || tg != (Target{}) {
		t.Fatalf("a function with no versions: %+v %v", tg, err)
	}
	if _, err := h.m.NewestSnapshotOf(ctx, "app", 0); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "has no snapshot") {
		t.Fatalf("no snapshot at all: %v", err)
	}
	h.deploy("app", "code-1")
	if err := h.db.DeleteAlias(ctx, "app", ver.Live); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.NewestSnapshotOf(ctx, "app", 0); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "no live alias") {
		t.Fatalf("versions but no live alias: %v", err)
	}
	if _, err := h.m.SetAlias(ctx, "app", ver.Live, ver.Routing{{Version: 1, Weight: ver.MaxWeight}}); err != nil {
		t.Fatal(err)
	}
	fn, n, err := h.m.ConfigOf(ctx, ver.Ref{Function: "app"}, false)
	if err != nil || n != 0 || fn.Digest != "code-1" {
		t.Fatalf("unqualified, not following live: %v %d %+v", err, n, fn)
	}
	if fn, n, err = h.m.ConfigOf(ctx, ver.Ref{Function: "app"}, true); err != nil || n != 1 || fn.Digest != "code-1" {
		t.Fatalf("unqualified, following live: %v %d %+v", err, n, fn)
	}
	if id, err := h.m.NewestSnapshotOf(ctx, "app", 1); err != nil || id == "" {
		t.Fatalf("version 1's snapshot: %q %v", id, err)
	}
}

// A pending snapshot restores with its deploy's configuration until the
// deploy ends; then it belongs to no one.
func TestPendingSnapshots(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	fn := &catalog.Function{Name: "app", Digest: "pending", CodeDir: h.dir + "/functions/app-9/code"}
	sn, err := h.snapshotOf(ctx, fn, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := h.m.SnapshotFunction(ctx, sn); err != nil || got != fn {
		t.Fatalf("a pending snapshot's configuration: %v %+v", err, got)
	}
	if used, _ := h.m.CodeDirsInUse(ctx); !used[h.dir+"/functions/app-9"] {
		t.Fatalf("a deploy's code is not in use: %v", used)
	}
	h.m.forgetPending(sn.ID)
	if _, err := h.m.SnapshotFunction(ctx, sn); err == nil || !strings.Contains(err.Error(), "did not finish") {
		t.Fatalf("an unfinished deploy's snapshot: %v", err)
	}
	// A crash left it: the next start removes it, snapshots of versions stay.
	r, _ := h.deploy("app", "code-1")
	if err := h.m.RemovePendingSnapshots(ctx); err != nil {
		t.Fatal(err)
	}
	snaps, _ := h.db.ListSnapshots(ctx, "")
	if len(snaps) != 1 || snaps[0].ID != r.Snapshots[0] || exists(sn.Dir) {
		t.Fatalf("after removing pending snapshots: %d left, pending dir left %v", len(snaps), exists(sn.Dir))
	}
}

// Aliases are checked, and say which versions they route to; rollback
// moves live back without booting.
func TestAliasesAndRollback(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	for _, d := range []string{"code-1", "code-2", "code-3"} {
		h.deploy("app", d)
	}
	if _, err := h.m.SetAlias(ctx, "app", "Bad Alias", ver.Routing{{Version: 1, Weight: ver.MaxWeight}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a bad alias name: %v", err)
	}
	if _, err := h.m.SetAlias(ctx, "app", "canary", ver.Routing{{Version: 1, Weight: 60}, {Version: 2, Weight: 50}}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("weights over the whole: %v", err)
	}
	if _, err := h.m.SetAlias(ctx, "nope", "canary", ver.Routing{{Version: 1, Weight: ver.MaxWeight}}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("an alias of no function: %v", err)
	}
	if _, err := h.m.SetAlias(ctx, "app", "canary", ver.Routing{{Version: 2, Weight: 90}, {Version: 3, Weight: 10}}); err != nil {
		t.Fatal(err)
	}
	vi, err := h.m.ListVersions(ctx, "app")
	if err != nil || len(vi) != 3 || vi[0].Snapshot == "" || len(vi[0].Aliases) != 0 ||
		!slices.Equal(vi[1].Aliases, []string{"canary"}) || !slices.Equal(vi[2].Aliases, []string{"canary", ver.Live}) {
		t.Fatalf("versions and their aliases: %v %+v", err, vi)
	}
	res, err := h.m.Rollback(ctx, "app", 0)
	if err != nil || res.From != 3 || res.To != 2 {
		t.Fatalf("rollback: %v %+v", err, res)
	}
	if res, err = h.m.Rollback(ctx, "app", 1); err != nil || res.From != 2 || res.To != 1 {
		t.Fatalf("rollback to 1: %v %+v", err, res)
	}
	if _, err := h.m.Rollback(ctx, "app", 7); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("rollback to a version that does not exist: %v", err)
	}
	if len(h.booted) != 3 {
		t.Fatalf("rollbacks booted: %d boots", len(h.booted))
	}
	if err := h.m.DeleteAlias(ctx, "app", "canary"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.GetAlias(ctx, "app", "canary"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a deleted alias: %v", err)
	}
}

// Retention collects the versions beyond the newest Keep that no alias
// routes to: their snapshots, here and in the registry, and their code.
// A pinned snapshot keeps its version until a later run.
func TestCollectVersions(t *testing.T) {
	h := newHarness(t, 2)
	ctx := context.Background()
	var codes []*code
	for _, d := range []string{"code-1", "code-2", "code-3"} {
		_, c := h.deploy("app", d)
		codes = append(codes, c)
	}
	// live moved 1 -> 2 -> 3; with Keep 2, the third deploy collected 1.
	v1, _ := h.db.GetVersion(ctx, "app", 1)
	if !v1.Collected || exists(codes[0].dir) || h.collected != 1 || !slices.Equal(h.registry.versions, []string{"app:1"}) || len(h.registry.snapshots) != 1 {
		t.Fatalf("version 1 collected %v, code left %v, metric %d, registry %+v", v1.Collected, exists(codes[0].dir), h.collected, h.registry)
	}
	// An alias keeps version 2; a pinned snapshot keeps version 3 for now.
	if _, err := h.m.SetAlias(ctx, "app", "old", ver.Routing{{Version: 2, Weight: ver.MaxWeight}}); err != nil {
		t.Fatal(err)
	}
	r4, _ := h.deploy("app", "code-4")
	v3snap, _ := h.m.NewestSnapshotOf(ctx, "app", 3)
	if err := h.db.SetSnapshotPinned(ctx, v3snap, true); err != nil {
		t.Fatal(err)
	}
	h.deploy("app", "code-5")
	for n, collected := range map[int]bool{2: false, 3: false, 4: false, 5: false} {
		if v, _ := h.db.GetVersion(ctx, "app", n); v.Collected != collected {
			t.Errorf("version %d collected %v", n, v.Collected)
		}
	}
	if err := h.db.SetSnapshotPinned(ctx, v3snap, false); err != nil {
		t.Fatal(err)
	}
	h.m.CollectVersions(ctx, "app")
	if v, _ := h.db.GetVersion(ctx, "app", 3); !v.Collected || exists(codes[2].dir) {
		t.Fatalf("version 3 once unpinned: collected %v, code left %v", v.Collected, exists(codes[2].dir))
	}
	if _, err := h.m.SetAlias(ctx, "app", "old", ver.Routing{{Version: 3, Weight: ver.MaxWeight}}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("an alias to a collected version: %v", err)
	}
	if _, err := h.db.GetSnapshot(ctx, r4.Snapshots[0]); err != nil {
		t.Fatalf("version 4 (among the newest) lost its snapshot: %v", err)
	}
}
