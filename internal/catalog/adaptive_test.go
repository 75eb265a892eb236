package catalog

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
)

// Settings, states and record inputs are kept across a reopen, read back
// as written, and pruned with their function or snapshot.
func TestRestoreTables(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "catalog.db")
	db := openTest(t, path)
	if _, err := db.RestoreSettings(ctx, "hello"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("settings of nothing: %v", err)
	}
	if _, err := db.RestoreState(ctx, "hello", 0); !errors.Is(err, ErrNotFound) {
		t.Fatalf("state of nothing: %v", err)
	}
	if _, err := db.PrepareEvent(ctx, "snap-0123456789ab"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("event of nothing: %v", err)
	}
	for _, name := range []string{"hello", "gone"} {
		if err := db.PutFunction(ctx, testFunction(name)); err != nil {
			t.Fatal(err)
		}
	}
	want := &RestoreSettings{Function: "hello", FunctionCreated: base, Strategy: "auto", Refresh: "traffic"}
	if err := db.PutRestoreSettings(ctx, want); err != nil {
		t.Fatal(err)
	}
	want.Strategy = "reap" // replaced
	want.Refresh = "off"
	if err := db.PutRestoreSettings(ctx, want); err != nil {
		t.Fatal(err)
	}
	for _, fv := range []struct {
		fn string
		v  int
		s  string
	}{{"hello", 0, `{"a":1}`}, {"hello", 3, `{"b":2}`}, {"gone", 1, `{}`}} {
		if err := db.PutRestoreState(ctx, fv.fn, fv.v, []byte(fv.s)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.PutRestoreSettings(ctx, &RestoreSettings{Function: "gone", Strategy: "auto"}); err != nil {
		t.Fatal(err)
	}
	sn := &Snapshot{ID: "snap-0123456789ab", Function: "hello", Stamp: `{}`, CreatedAt: base}
	if err := db.PutSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{sn.ID, "snap-ffffffffffff"} {
		if err := db.PutPrepareEvent(ctx, id, []byte(`{"size":512}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.DeleteFunction(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db = openTest(t, path)
	got, err := db.RestoreSettings(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if !got.FunctionCreated.Equal(base) || got.Strategy != "reap" || got.Refresh != "off" {
		t.Fatalf("settings %+v", got)
	}
	states, err := db.RestoreStates(ctx, "hello")
	if err != nil || len(states) != 2 || string(states[3]) != `{"b":2}` {
		t.Fatalf("states %v %v", states, err)
	}
	if n, err := db.PruneRestore(ctx); err != nil || n != 3 { // gone's settings and state, the unknown snapshot's event
		t.Fatalf("pruned %d rows: %v", n, err)
	}
	if _, err := db.RestoreState(ctx, "gone", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("gone's state: %v", err)
	}
	if ev, err := db.PrepareEvent(ctx, sn.ID); err != nil || string(ev) != `{"size":512}` {
		t.Fatalf("event %q %v", ev, err)
	}
	if s, err := db.RestoreState(ctx, "hello", 0); err != nil || string(s) != `{"a":1}` {
		t.Fatalf("state %q %v", s, err)
	}
}
