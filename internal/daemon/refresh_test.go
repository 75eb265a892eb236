package daemon

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/wire"
)

// A function published again elsewhere (other code, a newer snapshot)
// replaces the copy here: not while a VM, a pinned snapshot or a cold
// start uses it, then at the next round, by hand or on the node's
// schedule; the next pull brings the new code. A registry that cannot be
// read changes nothing, and a function that is the same stays.
func TestRefreshOutdatedFunction(t *testing.T) {
	ctx := context.Background()
	srv, withRegistry := signedRegistry(t)
	a, _ := fakeService(t, withRegistry)
	_, v1 := bootAndSnapshot(t, a, "fn")
	if _, err := a.PushSnapshot(ctx, v1.ID); err != nil {
		t.Fatal(err)
	}
	b, _ := fakeService(t, withRegistry)
	d, _ := fakeService(t, func(c *Config) { withRegistry(c); c.RegistryRefresh = time.Second })
	for _, n := range []*Service{b, d} {
		if _, err := n.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); err != nil {
			t.Fatal(err)
		}
	}
	refresh := func(want ...string) {
		t.Helper()
		got, err := b.RefreshFunctions(ctx)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("refresh replaced %v, %v; want %v", got, err, want)
		}
	}
	refresh() // the same code: nothing to do

	c, _ := fakeService(t, withRegistry)
	_, v2 := bootAndSnapshotSpec(t, c, FunctionSpec{Name: "fn",
		Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return 2\n"}))})
	if _, err := c.PushSnapshot(ctx, v2.ID); err != nil {
		t.Fatal(err)
	}
	newCode, _ := c.GetFunction(ctx, "fn")

	checkPullOntoOldCodeRefused(t, b, v2.ID)
	checkKeptWhileUsed(t, b, refresh)

	refresh("fn")
	if _, err := b.GetFunction(ctx, "fn"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the outdated copy is still here: %v", err)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); err != nil {
		t.Fatal(err)
	}
	if fn, err := b.GetFunction(ctx, "fn"); err != nil || fn.Digest != newCode.Digest {
		t.Fatalf("after the pull: %+v, %v; want digest %s", fn, err, newCode.Digest)
	}
	refresh() // now the same as the registry's

	// The node on a schedule replaced its copy by itself.
	deadline := time.Now().Add(15 * time.Second)
	for {
		if _, err := d.GetFunction(ctx, "fn"); errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the scheduled refresh did not replace the outdated copy within 15 s")
		}
		time.Sleep(100 * time.Millisecond)
	}

	srv.Stop()
	if _, err := b.RefreshFunctions(ctx); !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("refresh with the store down: %v", err)
	}
	if _, err := b.GetFunction(ctx, "fn"); err != nil {
		t.Fatalf("a refresh with the store down removed the function: %v", err)
	}
}

// checkPullOntoOldCodeRefused checks that a pull of snapshot snap, of new
// code, onto b's old copy of the function is refused before any chunk is
// fetched, and enters nothing in the catalog.
func checkPullOntoOldCodeRefused(t *testing.T, b *Service, snap string) {
	t.Helper()
	ctx := context.Background()
	before := b.ChunkCache().Stats()
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snap}); !errors.Is(err, ErrSnapshotUnusable) {
		t.Fatalf("pull of new code onto the old copy: %v, want ErrSnapshotUnusable", err)
	}
	if after := b.ChunkCache().Stats(); after.FetchedChunks != before.FetchedChunks {
		t.Fatalf("the refused pull fetched %d chunks", after.FetchedChunks-before.FetchedChunks)
	}
	if _, err := b.GetSnapshot(ctx, snap); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the refused pull entered the catalog: %v", err)
	}
}

// checkKeptWhileUsed checks that refresh replaces nothing while a pinned
// snapshot, a cold start or a VM uses b's copy of fn.
func checkKeptWhileUsed(t *testing.T, b *Service, refresh func(want ...string)) {
	t.Helper()
	ctx := context.Background()
	old := snapshotIDs(t, b, "fn")[0]
	if _, err := b.PinSnapshot(ctx, old, true); err != nil {
		t.Fatal(err)
	}
	refresh()
	if _, err := b.PinSnapshot(ctx, old, false); err != nil {
		t.Fatal(err)
	}
	g := b.fnGate("fn")
	g.RLock() // a cold start of fn under way
	refresh()
	g.RUnlock()
	vm, err := b.BootVM(ctx, "fn")
	if err != nil {
		t.Fatal(err)
	}
	refresh()
	if err := b.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
}
