package snapshots

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"

	"github.com/thaw-dev/thaw/internal/errdefs"
)

// storeDir is a memory store directory on tmpfs, removed when the test
// ends.
func storeDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "thaw-snapshots-test-")
	if err != nil {
		t.Skipf("no tmpfs for a memory store: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir + "/store"
}

func TestWithoutAStoreItSaysWhy(t *testing.T) {
	w := newWorld(t, nil)
	ctx := context.Background()
	sn := w.take(1)
	w.m.OpenStore(ctx) // no directory configured
	if err := w.m.NeedStore(); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("need store: %v", err)
	}
	if _, err := w.m.Put(ctx, sn.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("put without a store: %v", err)
	}
	in, err := w.m.StoreInfo(ctx)
	if err != nil || in.Available || in.Error == "" || in.Entries == nil {
		t.Errorf("store info %+v, %v", in, err)
	}
	if err := w.m.Unstore(ctx, sn.ID); err != nil {
		t.Errorf("unstore without a store: %v", err)
	}
	if err := w.m.CloseStore(); err != nil {
		t.Error(err)
	}
}

func TestStorePutMeasureUnstore(t *testing.T) {
	dir := storeDir(t)
	w := newWorld(t, func(c *Config) { c.StoreDir = dir })
	ctx := context.Background()
	w.m.OpenStore(ctx)
	t.Cleanup(func() { w.m.CloseStore() })
	if err := w.m.NeedStore(); err != nil {
		t.Fatal(err)
	}
	sn := w.take(1)
	e, err := w.m.Put(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Snapshot != sn.ID || e.Bytes <= 0 || !slices.Equal(w.vms.dropped, []string{sn.ID}) {
		t.Fatalf("entry %+v; standbys dropped for %v", e, w.vms.dropped)
	}
	mem, err := w.m.Memory(ctx, sn.ID)
	if err != nil || mem.StoreBytes != e.Bytes || len(mem.Files) < 2 {
		t.Fatalf("memory %+v, %v", mem, err)
	}
	in, err := w.m.StoreInfo(ctx)
	if err != nil || !in.Available || len(in.Entries) != 1 {
		t.Fatalf("store info %+v, %v", in, err)
	}
	if err := w.m.Unstore(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := w.m.Store().Get(sn.ID); err == nil {
		t.Error("the store keeps an unstored snapshot")
	}
	if _, err := w.m.Put(ctx, "snap-000000000000"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("put of an unknown snapshot: %v", err)
	}
}

// The store belongs to the catalog: at open, copies of snapshots the
// catalog no longer has go; the others stay.
func TestOpenStoreDropsCopiesOfUnknownSnapshots(t *testing.T) {
	dir := storeDir(t)
	w := newWorld(t, func(c *Config) { c.StoreDir = dir })
	ctx := context.Background()
	w.m.OpenStore(ctx)
	kept, gone := w.take(1), w.take(1)
	for _, sn := range []string{kept.ID, gone.ID} {
		if _, err := w.m.Put(ctx, sn); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.m.CloseStore(); err != nil {
		t.Fatal(err)
	}
	if err := w.db.DeleteSnapshot(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	m := New(w.m.cfg, w.m.d)
	m.OpenStore(ctx)
	t.Cleanup(func() { m.CloseStore() })
	if _, err := m.Store().Get(kept.ID); err != nil {
		t.Errorf("copy of a known snapshot went: %v", err)
	}
	if _, err := m.Store().Get(gone.ID); err == nil {
		t.Error("copy of a deleted snapshot stays")
	}
}
