package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/registry"
)

func pushRecord(t *testing.T, e *env, latest string, code string) {
	t.Helper()
	rec := registry.FunctionRecord{Name: "hello", Digest: strings.Repeat("d", 64), MemoryMiB: 4, VCPUs: 1, Latest: latest, LatestCreatedAt: time.Now().UTC()}
	if err := e.store.PushFunction(context.Background(), rec, []byte(code)); err != nil {
		t.Fatal(err)
	}
}

func gc(t *testing.T, e *env, opts registry.GCOptions) registry.GCStats {
	t.Helper()
	st, err := e.store.GC(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// A deleted snapshot's own chunks go; those another manifest names stay,
// and that snapshot still pulls whole. Nothing younger than the grace goes,
// and a dry run deletes nothing.
func TestGCDeletesOnlyUnreferencedChunks(t *testing.T) {
	eachStore(t, testGCDeletesOnlyUnreferencedChunks)
}

func testGCDeletesOnlyUnreferencedChunks(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	a := makeSnapshot(t, e.root, "snap-a", baseRegions())
	b := makeSnapshot(t, e.root, "snap-b", append(baseRegions(), region{30 * cs, cs, 8}))
	push(t, e, a)
	push(t, e, b)
	pushRecord(t, e, b.id, "code")
	before := e.count(t, "chunks/")

	if st := gc(t, e, registry.GCOptions{}); st.ChunksDeleted != 0 || st.Snapshots != 2 || st.Functions != 1 || st.Chunks != before {
		t.Fatalf("gc with both snapshots: %+v (chunks %d)", st, before)
	}
	if err := e.store.DeleteSnapshot(context.Background(), a.id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.GetManifest(context.Background(), a.id); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("deleted manifest: %v", err)
	}
	if st := gc(t, e, registry.GCOptions{Grace: time.Hour}); st.ChunksDeleted != 0 || st.ChunksYoung == 0 {
		t.Fatalf("gc within the grace deleted: %+v", st)
	}
	dry := gc(t, e, registry.GCOptions{DryRun: true})
	if dry.ChunksDeleted == 0 || e.count(t, "chunks/") != before {
		t.Fatalf("dry run: %+v; objects %d of %d", dry, e.count(t, "chunks/"), before)
	}
	st := gc(t, e, registry.GCOptions{})
	// a's manifest.json is its own; everything else b shares.
	if st.ChunksDeleted != dry.ChunksDeleted || st.ChunksDeleted < 1 || st.BytesDeleted <= 0 {
		t.Fatalf("gc: %+v (dry run %+v)", st, dry)
	}
	if n := e.count(t, "chunks/"); n != before-st.ChunksDeleted {
		t.Fatalf("%d chunks left, want %d", n, before-st.ChunksDeleted)
	}
	dst, err := pullTo(t, e, b.id)
	if err != nil {
		t.Fatalf("pull of the kept snapshot after gc: %v", err)
	}
	sameTree(t, b.dir, dst)
	if again := gc(t, e, registry.GCOptions{}); again.ChunksDeleted != 0 {
		t.Fatalf("second gc deleted %d", again.ChunksDeleted)
	}
}

// Deleting a function's newest snapshot moves its record to the next
// newest; deleting the last removes the record, and gc then removes the
// code archive no record names.
func TestDeleteSnapshotMovesFunctionRecord(t *testing.T) {
	eachStore(t, testDeleteSnapshotMovesFunctionRecord)
}

func testDeleteSnapshotMovesFunctionRecord(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	a := makeSnapshot(t, e.root, "snap-old", baseRegions())
	time.Sleep(10 * time.Millisecond)
	b := makeSnapshot(t, e.root, "snap-new", baseRegions())
	push(t, e, a)
	push(t, e, b)
	pushRecord(t, e, b.id, "code v2")
	list, err := e.store.ListSnapshots(context.Background())
	if err != nil || len(list) != 2 || list[0].ID != b.id || !list[0].Latest || list[1].Latest {
		t.Fatalf("list %+v %v", list, err)
	}
	if err := e.store.DeleteSnapshot(context.Background(), b.id); err != nil {
		t.Fatal(err)
	}
	r, err := e.store.GetFunction(context.Background(), "hello")
	if err != nil || r.Latest != a.id {
		t.Fatalf("record after deleting the newest: %+v %v", r, err)
	}
	if err := e.store.DeleteSnapshot(context.Background(), a.id); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.GetFunction(context.Background(), "hello"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("record after deleting the last snapshot: %v", err)
	}
	if err := e.store.DeleteSnapshot(context.Background(), a.id); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("deleting twice: %v", err)
	}
	st := gc(t, e, registry.GCOptions{})
	if st.CodeDeleted != 1 || e.count(t, "chunks/") != 0 || e.count(t, "code/") != 0 {
		t.Fatalf("gc of an empty registry: %+v", st)
	}
}

// A manifest gc cannot read might hold the only reference to chunks: gc
// refuses and deletes nothing.
func TestGCRefusesWhatItCannotRead(t *testing.T) { eachStore(t, testGCRefusesWhatItCannotRead) }

func testGCRefusesWhatItCannotRead(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	a := makeSnapshot(t, e.root, "snap-a", baseRegions())
	push(t, e, a)
	if err := e.store.DeleteSnapshot(context.Background(), a.id); err != nil {
		t.Fatal(err)
	}
	e.put(t, "snapshots/snap-bad/manifest.json", []byte(`{"magic":"thaw-remote-snapshot"`))
	before := e.count(t, "chunks/")
	if _, err := e.store.GC(context.Background(), registry.GCOptions{}); !errors.Is(err, registry.ErrInvalid) {
		t.Fatalf("gc with a damaged manifest: %v", err)
	}
	if n := e.count(t, "chunks/"); n != before {
		t.Fatalf("gc deleted %d chunks though it refused", before-n)
	}
}

// A push waits while a collection holds its lease; a collection waits for
// running pushes and gives up with ErrBusy after its wait; a lease not
// renewed within LeaseTTL (its holder died) is ignored.
func TestGCAndPushLeases(t *testing.T) { eachStore(t, testGCAndPushLeases) }

func testGCAndPushLeases(t *testing.T, newEnv envMaker) {
	old := registry.LeaseTTL
	registry.LeaseTTL = 3 * time.Second
	t.Cleanup(func() { registry.LeaseTTL = old })
	e := newEnv(t, 0)
	ctx := context.Background()
	put := func(key string) { e.put(t, key, []byte("{}")) }

	// A push lease of a live writer: gc waits, then refuses.
	put("locks/push/other.json")
	if _, err := e.store.GC(ctx, registry.GCOptions{Wait: 700 * time.Millisecond}); !errors.Is(err, registry.ErrBusy) {
		t.Fatalf("gc beside a running push: %v", err)
	}
	// The writer died: its lease goes stale and the next gc removes it.
	time.Sleep(registry.LeaseTTL + 500*time.Millisecond)
	if st := gc(t, e, registry.GCOptions{}); st.StaleLeases != 1 {
		t.Fatalf("stale leases removed: %+v", st)
	}
	if n := e.count(t, "locks/"); n != 0 {
		t.Fatalf("%d lease objects left after gc", n)
	}

	// A collection's lease: a push waits until it is gone.
	put("locks/gc.json")
	fx := makeSnapshot(t, e.root, "snap-a", baseRegions())
	done := make(chan error, 1)
	go func() { _, _, err := e.store.Push(ctx, fx.dir, registry.PushInfo{}, nil); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("push ran beside a collection: %v", err)
	case <-time.After(1500 * time.Millisecond):
	}
	if err := e.store.Objects().Delete(ctx, "locks/gc.json"); err != nil {
		t.Fatal(err)
	}
	if err := polltest.Receive(t, done, 30*time.Second, "the push once the collection's lease was removed"); err != nil {
		t.Fatal(err)
	}
	if n := e.count(t, "locks/"); n != 0 {
		t.Fatalf("push left %d lease objects", n)
	}
	// A push canceled while it waits says why.
	put("locks/gc.json")
	cctx, cancel := context.WithTimeout(ctx, 800*time.Millisecond)
	defer cancel()
	if _, _, err := e.store.Push(cctx, fx.dir, registry.PushInfo{}, nil); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push canceled while waiting for gc: %v", err)
	}
}
