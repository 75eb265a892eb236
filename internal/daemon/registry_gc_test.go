package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/wire"
)

// List, delete and collect through the service, on the fake VMM and a real
// MinIO: a deleted snapshot leaves the listing and its own chunks go at
// the collection, a pull of it then fails cleanly, bad requests are 400
// and a node without a registry says so.
func TestRegistryListDeleteGC(t *testing.T) {
	ctx := context.Background()
	none, _ := fakeService(t, nil)
	if _, err := none.ListRegistrySnapshots(ctx); !errors.Is(err, ErrConflict) {
		t.Fatalf("list without a registry: %v", err)
	}
	srv, withRegistry := signedRegistry(t)
	a, _ := fakeService(t, withRegistry)
	if none.Info().Registry != nil {
		t.Fatal("info shows a registry on a node without one")
	}
	info := a.Info()
	if r := info.Registry; r == nil || r.Bucket != srv.Config.Bucket || r.Endpoint != srv.Config.Endpoint || !r.Import || r.CacheDir == "" {
		t.Fatalf("info.registry = %+v", info.Registry)
	}
	if b, _ := json.Marshal(info); strings.Contains(string(b), srv.Config.SecretKey) || strings.Contains(string(b), srv.Config.AccessKey) {
		t.Fatalf("info shows credentials: %s", b)
	}
	_, one := bootAndSnapshot(t, a, "fn")
	_, two := snapshotOf(t, a, "fn")
	for _, id := range []string{one.ID, two.ID} {
		if _, err := a.PushSnapshot(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	checkTwoListed(t, a)
	checkRegistryBadRequests(t, a)
	if err := a.DeleteRegistrySnapshot(ctx, one.ID); err != nil {
		t.Fatal(err)
	}
	if list, _ := a.ListRegistrySnapshots(ctx); len(list) != 1 || list[0].ID != two.ID || !list[0].Latest {
		t.Fatalf("after delete: %+v", list)
	}
	// Within the default grace nothing goes.
	res, err := a.CollectRegistry(ctx, wire.GCRequest{})
	if err != nil || res.ChunksDeleted != 0 || res.ChunksYoung == 0 || res.Snapshots != 1 {
		t.Fatalf("gc within the grace: %+v, %v", res, err)
	}
	zero := 0
	res, err = a.CollectRegistry(ctx, wire.GCRequest{GraceS: &zero})
	if err != nil || res.ChunksDeleted == 0 || res.BytesDeleted == 0 {
		t.Fatalf("gc: %+v, %v", res, err)
	}
	b, _ := fakeService(t, withRegistry)
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: one.ID}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pull of a deleted snapshot: %v", err)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); err != nil {
		t.Fatalf("pull of the kept snapshot after gc: %v", err)
	}
	if _, err := b.CheckSnapshot(ctx, two.ID); err != nil {
		t.Fatalf("kept snapshot does not verify after gc: %v", err)
	}
	// The operation form.
	op, err := a.StartGC(ctx, wire.GCRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := a.WaitOperation(ctx, op.ID); err != nil || got.State != wire.OpSucceeded || got.Result == nil || got.Result.GC == nil || !got.Result.GC.DryRun {
		t.Fatalf("gc operation: %+v, %v", got, err)
	}
	srv.Stop()
	if _, err := a.CollectRegistry(ctx, wire.GCRequest{}); !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("gc with the store down: %v", err)
	}
}

// checkTwoListed checks that a's registry lists two snapshots of fn, one of
// them the latest, each with its chunks.
func checkTwoListed(t *testing.T, a *Service) {
	t.Helper()
	list, err := a.ListRegistrySnapshots(context.Background())
	if err != nil || len(list) != 2 {
		t.Fatalf("list = %+v, %v", list, err)
	}
	latest := 0
	for _, s := range list {
		if s.Latest {
			latest++
		}
		if s.Function != "fn" || s.Chunks == 0 || s.StoredBytes == 0 {
			t.Fatalf("listed %+v", s)
		}
	}
	if latest != 1 {
		t.Fatalf("%d snapshots marked latest", latest)
	}
}

// checkRegistryBadRequests checks that a malformed or unknown snapshot id
// and a negative grace are refused.
func checkRegistryBadRequests(t *testing.T, a *Service) {
	t.Helper()
	ctx := context.Background()
	if err := a.DeleteRegistrySnapshot(ctx, "../x"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("delete of a malformed id: %v", err)
	}
	if err := a.DeleteRegistrySnapshot(ctx, "snap-0123456789ab"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of an unknown snapshot: %v", err)
	}
	neg := -1
	if _, err := a.CollectRegistry(ctx, wire.GCRequest{GraceS: &neg}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative grace: %v", err)
	}
}

// A pull runs the node's snapshot collection (SnapshotKeep), sparing the
// snapshot it just pulled even when that one is older than those kept.
func TestPullCollectsSnapshots(t *testing.T) {
	ctx := context.Background()
	_, withRegistry, _, older, newer := pushedTwo(t)
	b, _ := fakeService(t, func(c *Config) { withRegistry(c); c.SnapshotKeep = 1 })
	ids := func() []string { return snapshotIDs(t, b, "fn") }
	pull := func(id string) {
		t.Helper()
		if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: id}); err != nil {
			t.Fatal(err)
		}
	}
	pull(newer.ID)
	pull(older.ID) // older than the one kept, but just pulled: spared
	if got := ids(); len(got) != 2 {
		t.Fatalf("after pulling an older snapshot: %v, want both", got)
	}
	// The next pull collects the older one.
	if err := b.DeleteSnapshot(ctx, newer.ID); err != nil {
		t.Fatal(err)
	}
	pull(newer.ID)
	if got := ids(); len(got) != 1 || got[0] != newer.ID {
		t.Fatalf("after pulling the newer snapshot again: %v, want [%s]", got, newer.ID)
	}
}

// A node with a collection interval collects by itself: the chunks of a
// deleted snapshot go without anyone asking, the metrics count it, and
// Close ends the loop. A bad interval or grace is refused at start.
func TestScheduledRegistryGC(t *testing.T) {
	ctx := context.Background()
	srv, withRegistry, a, old, _ := pushedTwo(t)
	if err := a.DeleteRegistrySnapshot(ctx, old.ID); err != nil {
		t.Fatal(err)
	}
	before := srv.Count(t, "chunks/")
	b, _ := fakeService(t, func(c *Config) {
		withRegistry(c)
		c.RegistryGCInterval = time.Second
		c.RegistryGCGrace = time.Millisecond
	})
	deadline := time.Now().Add(20 * time.Second)
	for srv.Count(t, "chunks/") == before {
		if time.Now().After(deadline) {
			t.Fatalf("no scheduled collection within 20 s (%d chunks)", before)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Counted once the collection returns, after its deletions.
	for !strings.Contains(promText(t, b), `thaw_registry_gc_total{outcome="ok"}`) {
		if time.Now().After(deadline) {
			t.Fatal("the scheduled collection is not counted")
		}
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"}); err != nil {
		t.Fatalf("pull of the kept snapshot after the scheduled collection: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Close(ctx) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the collection loop")
	}

	for _, edit := range []func(*Config){
		func(c *Config) { c.RegistryGCInterval = time.Minute }, // no registry
		func(c *Config) { withRegistry(c); c.RegistryGCInterval = time.Millisecond },
		func(c *Config) { withRegistry(c); c.RegistryGCInterval = -time.Second },
		func(c *Config) { withRegistry(c); c.RegistryGCGrace = -time.Second },
		func(c *Config) { withRegistry(c); c.RegistryRefresh = time.Millisecond },
	} {
		var cfg Config
		edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "registry collection") && !strings.Contains(err.Error(), "registry refresh interval") {
			t.Errorf("config %+v: %v", cfg, err)
		}
	}
}

// pushedTwo starts a MinIO and a node using it, which pushes two snapshots
// of function fn, the older first.
func pushedTwo(t *testing.T) (*miniotest.Server, func(*Config), *Service, *catalog.Snapshot, *catalog.Snapshot) {
	t.Helper()
	srv, withRegistry := signedRegistry(t)
	a, _ := fakeService(t, withRegistry)
	_, older := bootAndSnapshot(t, a, "fn")
	_, newer := snapshotOf(t, a, "fn")
	for _, id := range []string{older.ID, newer.ID} {
		if _, err := a.PushSnapshot(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	return srv, withRegistry, a, older, newer
}
