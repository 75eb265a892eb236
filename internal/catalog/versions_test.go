package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"sync"
	"testing"
)

func publish(t *testing.T, db *DB, fn *Function, digest string, snaps []string, promote ...string) *Version {
	t.Helper()
	v, err := db.PublishVersion(context.Background(), Publish{Function: fn,
		Version: &Version{Function: fn.Name, Digest: digest, Config: *fn, CreatedAt: base}, Snapshots: snaps, Promote: promote})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestPublishVersion(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	fn := testFunction("hello")
	if err := db.PutSnapshot(ctx, &Snapshot{ID: "snap-1", Function: "hello", Version: -1, CreatedAt: base}); err != nil {
		t.Fatal(err)
	}
	v1 := publish(t, db, fn, "d1", []string{"snap-1"}, "live")
	if v1.Number != 1 {
		t.Fatalf("first version is %d", v1.Number)
	}
	sn, _ := db.GetSnapshot(ctx, "snap-1")
	if sn.Version != 1 {
		t.Fatalf("the deploy's snapshot has version %d, want 1", sn.Version)
	}
	got, err := db.GetFunction(ctx, "hello")
	if err != nil || got.Digest != fn.Digest {
		t.Fatalf("the function was not created: %v %+v", err, got)
	}
	fn2 := testFunction("hello")
	fn2.Digest, fn2.MemoryMiB = "cd", 512
	v2 := publish(t, db, fn2, "d2", nil, "live")
	if v2.Number != 2 {
		t.Fatalf("second version is %d", v2.Number)
	}
	if got, _ := db.GetFunction(ctx, "hello"); got.MemoryMiB != 512 {
		t.Fatalf("the function's configuration was not replaced: %+v", got)
	}
	back, err := db.GetVersion(ctx, "hello", 1)
	if err != nil || back.Config.MemoryMiB != 256 || back.Digest != "d1" {
		t.Fatalf("version 1 changed: %v %+v", err, back)
	}
	if v, err := db.VersionByDigest(ctx, "hello", "d2"); err != nil || v.Number != 2 {
		t.Fatalf("by digest: %v %+v", err, v)
	}
	if _, err := db.VersionByDigest(ctx, "hello", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown digest: %v", err)
	}
	a, err := db.GetAlias(ctx, "hello", "live")
	if err != nil || string(a.Routing) != `[{"version":2,"weight":100}]` || !reflect.DeepEqual(a.History, []int{1}) {
		t.Fatalf("live after two deploys: %v %s %v", err, a.Routing, a.History)
	}
	// A deploy without promotion leaves live alone.
	publish(t, db, fn2, "d3", nil)
	if a, _ := db.GetAlias(ctx, "hello", "live"); string(a.Routing) != `[{"version":2,"weight":100}]` {
		t.Fatalf("live moved without promotion: %s", a.Routing)
	}
	vs, _ := db.ListVersions(ctx, "hello")
	if len(vs) != 3 || vs[0].Number != 1 || vs[2].Number != 3 {
		t.Fatalf("versions: %+v", vs)
	}
}

// Publishes of one function racing each other get distinct, consecutive
// numbers (the transaction reads and takes the next one at once).
func TestConcurrentPublishes(t *testing.T) {
	db := newDB(t)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			publish(t, db, testFunction("hello"), "d", nil, "live")
		}()
	}
	wg.Wait()
	vs, _ := db.ListVersions(context.Background(), "hello")
	for i, v := range vs {
		if v.Number != i+1 {
			t.Fatalf("versions %d: numbers %+v", len(vs), vs)
		}
	}
	if len(vs) != 8 {
		t.Fatalf("%d versions, want 8", len(vs))
	}
}

func TestSetAlias(t *testing.T) {
	ctx := context.Background()
	db := newDB(t)
	publish(t, db, testFunction("hello"), "d1", nil, "live")
	publish(t, db, testFunction("hello"), "d2", nil, "live")
	routing := json.RawMessage(`[{"version":1,"weight":90},{"version":2,"weight":10}]`)
	a, err := db.SetAlias(ctx, "hello", "live", routing, []int{1, 2})
	if err != nil || string(a.Routing) != string(routing) || !reflect.DeepEqual(a.History, []int{1, 2}) {
		t.Fatalf("set: %v %+v", err, a)
	}
	if _, err := db.SetAlias(ctx, "hello", "canary", json.RawMessage(`[{"version":3,"weight":100}]`), []int{3}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("alias to a version that does not exist: %v", err)
	}
	if err := db.SetVersionCollected(ctx, "hello", 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SetAlias(ctx, "hello", "old", json.RawMessage(`[{"version":1,"weight":100}]`), []int{1}); !errors.Is(err, ErrCollected) {
		t.Fatalf("alias to a collected version: %v", err)
	}
	if _, err := db.GetAlias(ctx, "hello", "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused alias was created: %v", err)
	}
	as, _ := db.ListAliases(ctx, "hello")
	if len(as) != 1 || as[0].Name != "live" {
		t.Fatalf("aliases: %+v", as)
	}
	if err := db.DeleteAlias(ctx, "hello", "live"); err != nil {
		t.Fatal(err)
	}
	if err := db.DeleteAlias(ctx, "hello", "live"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v", err)
	}
	if err := db.DeleteFunctionVersions(ctx, "hello"); err != nil {
		t.Fatal(err)
	}
	if vs, _ := db.ListVersions(ctx, "hello"); len(vs) != 0 {
		t.Fatalf("versions left: %+v", vs)
	}
}

func TestAliasHistoryIsBounded(t *testing.T) {
	a := &Alias{}
	for v := 1; v <= MaxAliasHistory+10; v++ {
		a.Routing = json.RawMessage(`[{"version":` + itoa(v) + `,"weight":100}]`)
		a.remember()
		a.remember() // the same version twice is remembered once
	}
	if len(a.History) != MaxAliasHistory || a.History[len(a.History)-1] != MaxAliasHistory+10 {
		t.Fatalf("history %v", a.History)
	}
}

func itoa(v int) string { b, _ := json.Marshal(v); return string(b) }
