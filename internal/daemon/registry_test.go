package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon/regsync"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// Push on one node, pull by function on a node without the function, on
// the fake VMM and a real MinIO; the failure paths leave nothing behind.
func TestPushPull(t *testing.T) {
	ctx := context.Background()
	if s, _ := fakeService(t, nil); true {
		_, sn := bootAndSnapshot(t, s, "nofn")
		if _, err := s.PushSnapshot(ctx, sn.ID); !errors.Is(err, ErrConflict) {
			t.Fatalf("push without a registry: %v", err)
		}
	}
	srv, withRegistry := signedRegistry(t)
	a, _ := fakeService(t, withRegistry)
	_, sn := bootAndSnapshot(t, a, "fn")
	res, err := a.PushSnapshot(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Chunks == 0 || res.Uploaded != res.Chunks || res.ChunkSize != registry.DefaultChunkSize {
		t.Fatalf("push = %+v", res)
	}

	b, _ := fakeService(t, withRegistry)
	for _, bad := range []wire.PullRequest{{}, {Snapshot: sn.ID, Function: "fn"}, {Snapshot: "../x"}} {
		if _, err := b.PullSnapshot(ctx, bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("pull %+v: %v, want ErrInvalid", bad, err)
		}
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "nosuch"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("pull of an unknown function: %v", err)
	}
	// An interrupted pull keeps nothing but verified chunks.
	cctx, cancel := context.WithCancel(ctx)
	var progressed bool
	_, err = b.PullSnapshot(WithProgress(cctx, func(p wire.OperationProgress) {
		if p.Phase == "pulling" && p.Done > 0 && !progressed {
			progressed = true
			cancel()
		}
	}), wire.PullRequest{Snapshot: sn.ID})
	if err == nil {
		t.Fatal("cancelled pull succeeded")
	}
	if left, _ := filepath.Glob(filepath.Join(b.snapshotsDir(), "*")); len(left) != 0 {
		t.Fatalf("interrupted pull left %v", left)
	}
	if _, err := b.GetSnapshot(ctx, sn.ID); !errors.Is(err, ErrNotFound) {
		t.Fatalf("interrupted pull entered the catalog: %v", err)
	}
	if _, err := b.GetFunction(ctx, "fn"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("interrupted pull left the function it created: %v", err)
	}
	pr, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn"})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Snapshot.ID != sn.ID || !pr.FunctionCreated {
		t.Fatalf("pull = %+v", pr)
	}
	if _, err := b.CheckSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("pulled snapshot does not verify: %v", err)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: sn.ID}); !errors.Is(err, ErrExists) {
		t.Fatalf("second pull: %v", err)
	}

	srv.Stop()
	if _, err := a.PushSnapshot(ctx, sn.ID); !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("push with the store down: %v", err)
	}
	if _, err := os.Stat(sn.Dir); err != nil {
		t.Fatalf("local snapshot after a failed push: %v", err)
	}
}

// Lazy pulls on the fake VMM and a real MinIO: the snapshot enters the
// catalog with its memory in the registry (a placeholder here), verifies,
// refuses what needs the memory, completes in place on a full pull, is
// deleted; an invocation of a function a node never saw imports it and
// (cached: the memory pulled first) answers; with the store down an
// import or a pull is 503 and leaves nothing.
func TestLazyPull(t *testing.T) {
	ctx := context.Background()
	srv, withRegistry := signedRegistry(t, func(c *Config) { c.KeepAlive, c.VMMPool = -1, -1 })
	a, _ := fakeService(t, withRegistry)
	_, sn := bootAndSnapshot(t, a, "fn")
	if _, err := a.PushSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	want, err := snapshot.HashFile(filepath.Join(sn.Dir, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}

	b, _ := fakeService(t, withRegistry)
	pr, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "fn", Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Snapshot.Memory != wire.MemoryRemote || !pr.FunctionCreated {
		t.Fatalf("lazy pull = %+v", pr)
	}
	lazy, err := b.GetSnapshot(ctx, sn.ID)
	if err != nil || !lazy.RemoteMemory {
		t.Fatalf("lazy snapshot in the catalog: %v %+v", err, lazy)
	}
	mem := filepath.Join(lazy.Dir, snapshot.MemoryFile)
	if st, err := os.Stat(mem); err != nil || st.Size() != want.Size || allocated(mem) != 0 {
		t.Fatalf("placeholder: %v, %d bytes allocated", err, allocated(mem))
	}
	if _, err := b.CheckSnapshot(ctx, sn.ID); err != nil {
		t.Fatalf("lazy snapshot does not verify: %v", err)
	}
	checkLazyRefusals(t, b, sn.ID, lazy.Dir)
	checkLazyCompletes(t, b, sn.ID, want)
	checkLazyDeletes(t, withRegistry, sn.ID)
	checkImports(t, withRegistry, sn.ID)

	// The store down: a lazy snapshot that needs its memory, and an import.
	e, _ := fakeService(t, withRegistry)
	if _, err := e.PullSnapshot(ctx, wire.PullRequest{Function: "fn", Lazy: true}); err != nil {
		t.Fatal(err)
	}
	f, _ := fakeService(t, withRegistry)
	srv.Stop()
	if _, err := e.InvokeCold(ctx, ColdRequest{Function: "fn", Strategy: "cached"}); !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("cached on a lazy snapshot with the store down: %v", err)
	}
	if got, _ := e.GetSnapshot(ctx, sn.ID); got == nil || !got.RemoteMemory {
		t.Fatalf("lazy snapshot after a failed completion: %+v", got)
	}
	if left, _ := filepath.Glob(filepath.Join(e.snapshotsDir(), sn.ID, ".memory*")); len(left) != 0 {
		t.Fatalf("failed completion left %v", left)
	}
	if _, err := f.InvokeCold(ctx, ColdRequest{Function: "fn", Strategy: "vanilla"}); !errors.Is(err, ErrRegistryUnavailable) {
		t.Fatalf("import with the store down: %v", err)
	}
	if fns, _ := f.ListFunctions(ctx); len(fns) != 0 {
		t.Fatalf("failed import left functions %+v", fns)
	}
}

// checkLazyRefusals checks that b refuses to copy, push or lazily pull again
// its lazy snapshot snap (in dir), and that a damaged remote manifest makes
// the snapshot unusable, not trusted.
func checkLazyRefusals(t *testing.T, b *Service, snap, dir string) {
	t.Helper()
	ctx := context.Background()
	for what, err := range map[string]error{
		"copy": func() error { _, err := b.CopySnapshot(ctx, snap); return err }(),
		"push": func() error { _, err := b.PushSnapshot(ctx, snap); return err }(),
		"lazy pull again": func() error {
			_, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snap, Lazy: true})
			return err
		}(),
	} {
		if !errors.Is(err, ErrConflict) && !errors.Is(err, ErrExists) {
			t.Errorf("%s of a lazy snapshot: %v", what, err)
		}
	}
	// A damaged remote manifest: the snapshot is unusable, not trusted.
	rmPath := filepath.Join(dir, regsync.RemoteManifestFile)
	rmBytes, err := os.ReadFile(rmPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rmPath, append([]byte(nil), rmBytes[:len(rmBytes)/2]...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CheckSnapshot(ctx, snap); !errors.Is(err, ErrSnapshotUnusable) {
		t.Fatalf("lazy snapshot with a damaged remote manifest: %v", err)
	}
	if err := os.WriteFile(rmPath, rmBytes, 0o600); err != nil {
		t.Fatal(err)
	}
}

// checkLazyCompletes checks that a full pull completes b's lazy snapshot
// snap in place: its memory is want's, the remote manifest goes, it
// verifies, and a further pull finds it complete.
func checkLazyCompletes(t *testing.T, b *Service, snap string, want snapshot.FileInfo) {
	t.Helper()
	ctx := context.Background()
	lazy, err := b.GetSnapshot(ctx, snap)
	if err != nil {
		t.Fatal(err)
	}
	dir := lazy.Dir
	mem := filepath.Join(dir, snapshot.MemoryFile)
	rmPath := filepath.Join(dir, regsync.RemoteManifestFile)
	pr, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snap})
	if err != nil || !pr.Completed || pr.Snapshot.Memory != wire.MemoryLocal || pr.FetchedChunks == 0 {
		t.Fatalf("completing pull: %v %+v", err, pr)
	}
	if got, err := snapshot.HashFile(mem); err != nil || got.SHA256 != want.SHA256 {
		t.Fatalf("completed memory: %v %v", err, got)
	}
	if _, err := os.Stat(rmPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remote manifest left after completion: %v", err)
	}
	if _, err := b.CheckSnapshot(ctx, snap); err != nil {
		t.Fatalf("completed snapshot does not verify: %v", err)
	}
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snap}); !errors.Is(err, ErrExists) {
		t.Fatalf("pull of a complete snapshot: %v", err)
	}
}

// checkLazyDeletes checks that a lazy snapshot, pulled on a new node,
// deletes without leaving files.
func checkLazyDeletes(t *testing.T, withRegistry func(*Config), snap string) {
	t.Helper()
	ctx := context.Background()
	c, _ := fakeService(t, withRegistry)
	if _, err := c.PullSnapshot(ctx, wire.PullRequest{Snapshot: snap, Lazy: true}); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteSnapshot(ctx, snap); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(c.snapshotsDir(), "*")); len(left) != 0 {
		t.Fatalf("deleted lazy snapshot left %v", left)
	}
}

// checkImports checks that an invocation of a function a node never saw
// imports it (cached pulls the memory first, the import counted in the
// total, not the set-up, also with the cache evicted), and that a node with
// import off does not.
func checkImports(t *testing.T, withRegistry func(*Config), snap string) {
	t.Helper()
	ctx := context.Background()
	d, _ := fakeService(t, withRegistry)
	inv, err := d.InvokeCold(ctx, ColdRequest{Function: "fn", Strategy: "cached", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"x":1}`)}})
	if err != nil || !inv.OK {
		t.Fatalf("invocation that imports: %v %+v", err, inv)
	}
	if r := inv.Timing.Restore; inv.Timing.ImportMS <= 0 || r.Source != "registry" || r.PullMS <= 0 {
		t.Fatalf("import timing %+v restore %+v", inv.Timing, r)
	}
	// The import is part of the total, not of the set-up; so with the cache evicted.
	checkImportTiming := func(inv *Invocation) {
		t.Helper()
		if tm := inv.Timing; tm.TotalMS < tm.ImportMS+tm.Restore.SetupMS {
			t.Fatalf("total %.1f ms, import %.1f ms, set-up %.1f ms", tm.TotalMS, tm.ImportMS, tm.Restore.SetupMS)
		}
	}
	checkImportTiming(inv)
	ev, _ := fakeService(t, withRegistry)
	inv, err = ev.InvokeCold(ctx, ColdRequest{Function: "fn", Strategy: "cached", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"x":1}`), EvictCache: true}})
	if err != nil || !inv.OK || inv.Timing.ImportMS <= 0 {
		t.Fatalf("evicted invocation that imports: %v %+v", err, inv)
	}
	checkImportTiming(inv)
	if got, _ := d.GetSnapshot(ctx, snap); got == nil || got.RemoteMemory {
		t.Fatalf("after cached: %+v", got)
	}
	off, _ := fakeService(t, func(c *Config) { withRegistry(c); c.NoRegistryImport = true })
	if _, err := off.InvokeCold(ctx, ColdRequest{Function: "fn", Strategy: "cached"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("invocation with import off: %v", err)
	}
}
