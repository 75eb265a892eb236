package regsync

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// outdated is a node trusting trusted keys with its own copy of hello,
// other code created before the registry's newest snapshot of it, and a
// function of its own never published.
func outdated(t *testing.T, reg string, trusted ...string) (*node, *catalog.Snapshot) {
	t.Helper()
	b := newNode(t, reg, trusted...)
	old := time.Now().Add(-time.Hour)
	sn := b.addSnapshot(t, "snap-aaaaaaaaaaaa", &catalog.Function{Name: "hello", Digest: digestOf("hello v1"), MemoryMiB: 4, CreatedAt: old}, old)
	b.addSnapshot(t, "snap-bbbbbbbbbbbb", &catalog.Function{Name: "mine", Digest: digestOf("mine"), MemoryMiB: 4, CreatedAt: old}, old)
	return b, sn
}

// A function published again elsewhere is replaced (its VMs stopped, its
// snapshots and the function removed) unless a cold start holds its gate,
// a VM of it runs or a snapshot of it is pinned; a function never
// published stays.
func TestRefreshReplacesOutdated(t *testing.T) {
	ctx := context.Background()
	reg := registryDir(t)
	a, _ := published(t, reg, time.Now())
	b, sn := outdated(t, reg, a.RegistryKey().String())

	refresh := func(want ...string) {
		t.Helper()
		got, err := b.RefreshFunctions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("replaced %v, want %v", got, want)
		}
	}
	g := b.Gate("hello")
	g.RLock() // a cold start under way
	refresh()
	g.RUnlock()
	if got := b.rec.get(&b.rec.released); len(got) != 0 {
		t.Fatalf("VMs stopped while a cold start held the gate: %v", got)
	}

	b.running = &catalog.VM{ID: "vm-000000000001", Function: "hello", State: catalog.StateRunning}
	refresh()
	b.running = nil

	sn.Pinned = true
	if err := b.db.PutSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	refresh()
	sn.Pinned = false
	if err := b.db.PutSnapshot(ctx, sn); err != nil {
		t.Fatal(err)
	}
	if got := b.rec.get(&b.rec.forgot); len(got) != 0 {
		t.Fatalf("functions removed while in use: %v", got)
	}

	refresh("hello")
	if got := b.rec.get(&b.rec.deleted); !slices.Equal(got, []string{sn.ID}) {
		t.Fatalf("snapshots deleted %v, want %s", got, sn.ID)
	}
	if got := b.rec.get(&b.rec.forgot); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("functions removed %v, want hello", got)
	}
	if _, err := b.db.GetFunction(ctx, "mine"); err != nil {
		t.Fatalf("a function never published: %v", err)
	}
	refresh() // hello is gone here: nothing more to replace
}

// A node that does not trust the publishing key keeps its copy, and says
// nothing failed.
func TestRefreshKeepsOnUntrustedRecord(t *testing.T) {
	reg := registryDir(t)
	published(t, reg, time.Now())
	c, _ := outdated(t, reg)
	got, err := c.RefreshFunctions(context.Background())
	if err != nil || len(got) != 0 {
		t.Fatalf("refresh with an untrusted record: %v, %v", got, err)
	}
	if got := c.rec.get(&c.rec.forgot); len(got) != 0 {
		t.Fatalf("functions removed on an untrusted record: %v", got)
	}
}
