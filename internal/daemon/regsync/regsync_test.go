package regsync

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

const snapID = "snap-0123456789ab"

// published is a node that pushed function hello's snapshot snapID to
// the directory registry reg.
func published(t *testing.T, reg string, created time.Time) (*node, *catalog.Snapshot) {
	t.Helper()
	a := newNode(t, reg)
	fn := &catalog.Function{Name: "hello", Digest: digestOf("hello v2"), MemoryMiB: 4, CreatedAt: created}
	sn := a.addSnapshot(t, snapID, fn, created)
	res, err := a.PushSnapshot(context.Background(), sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	if res.Function != "hello" || res.Chunks == 0 || res.Uploaded != res.Chunks {
		t.Fatalf("push = %+v", res)
	}
	return a, sn
}

// pair is a registry directory, a node a that published snapshot sn of
// hello there, and a node b trusting a's key.
func pair(t *testing.T) (reg string, a *node, sn *catalog.Snapshot, b *node) {
	t.Helper()
	reg = registryDir(t)
	a, sn = published(t, reg, time.Now())
	return reg, a, sn, newNode(t, reg, a.RegistryKey().String())
}

func sameFile(t *testing.T, a, b string) {
	t.Helper()
	x, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	y, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(x, y) {
		t.Fatalf("%s and %s differ", a, b)
	}
}

// A push to a directory registry and a pull by function on a node without
// the function: the function is created from the record with the pushed
// code, the snapshot is written whole and verified, then entered.
func TestPushPullByFunction(t *testing.T) {
	ctx := context.Background()
	_, a, sn, b := pair(t)
	res, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "hello"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Snapshot.ID != snapID || !res.FunctionCreated || res.FetchedChunks == 0 {
		t.Fatalf("pull = %+v", res)
	}
	if got := b.rec.get(&b.rec.created); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("functions created %v, want hello", got)
	}
	fn, _ := a.db.GetFunction(ctx, "hello")
	want, err := codearchive.Pack(filepath.Join(fn.CodeDir, fn.Name))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b.rec.code["hello"], want) {
		t.Fatal("the function was created with other code than was pushed")
	}
	got, err := b.db.GetSnapshot(ctx, snapID)
	if err != nil || got.RemoteMemory || got.Stamp == "" {
		t.Fatalf("entered snapshot %+v, %v", got, err)
	}
	if _, _, err := snapshot.Check(got.Dir, nil); err != nil {
		t.Fatalf("pulled snapshot does not verify: %v", err)
	}
	sameFile(t, filepath.Join(sn.Dir, snapshot.MemoryFile), filepath.Join(got.Dir, snapshot.MemoryFile))
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snapID}); !errors.Is(err, errdefs.ErrExists) {
		t.Fatalf("pull of a snapshot here: %v, want ErrExists", err)
	}
}

// A lazy pull by id (the function created from its record) leaves the memory in the registry (a placeholder of its
// size and the remote manifest here); completing it fetches the memory,
// which then matches the pushed one, and the snapshot is local.
func TestLazyPullCompletes(t *testing.T) {
	ctx := context.Background()
	_, _, sn, b := pair(t)
	res, err := b.PullSnapshot(ctx, wire.PullRequest{Snapshot: snapID, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.FunctionCreated || res.Snapshot.ID != snapID {
		t.Fatalf("lazy pull = %+v", res)
	}
	lazy, err := b.db.GetSnapshot(ctx, snapID)
	if err != nil || !lazy.RemoteMemory {
		t.Fatalf("lazy snapshot %+v, %v", lazy, err)
	}
	if _, err := snapshot.CheckLazy(lazy.Dir); err != nil {
		t.Fatal(err)
	}
	rm, err := RemoteManifest(lazy)
	if err != nil || rm.ID != snapID {
		t.Fatalf("remote manifest %v, %v", rm, err)
	}
	if err := NeedLocalMemory(lazy, "copying it"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a lazy snapshot's memory is needed: %v, want ErrConflict", err)
	}
	done, err := b.CompleteSnapshot(ctx, snapID)
	if err != nil {
		t.Fatal(err)
	}
	if done.RemoteMemory || done.Stamp == "" {
		t.Fatalf("completed snapshot %+v", done)
	}
	if _, err := os.Stat(filepath.Join(lazy.Dir, RemoteManifestFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("remote manifest left after completion: %v", err)
	}
	sameFile(t, filepath.Join(sn.Dir, snapshot.MemoryFile), filepath.Join(lazy.Dir, snapshot.MemoryFile))
	if _, _, err := snapshot.Check(lazy.Dir, nil); err != nil {
		t.Fatalf("completed snapshot does not verify: %v", err)
	}
}

// A function from the registry whose code digests to other than the
// snapshot was taken with is refused and removed again; a node that does
// not trust the pushing node's key uses none of its records.
func TestPullRefusals(t *testing.T) {
	ctx := context.Background()
	reg, _, _, b := pair(t)
	b.createDigest = digestOf("other code")
	if _, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "hello"}); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("pull onto other code: %v, want ErrSnapshotUnusable", err)
	}
	if got := b.rec.get(&b.rec.forgot); !slices.Equal(got, []string{"hello"}) {
		t.Fatalf("functions removed %v, want hello", got)
	}
	if _, err := b.db.GetSnapshot(ctx, snapID); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("snapshot entered after a refused pull: %v", err)
	}

	c := newNode(t, reg)
	if _, err := c.PullSnapshot(ctx, wire.PullRequest{Function: "hello"}); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("pull of an untrusted record: %v, want ErrSnapshotUnusable", err)
	}
	if got := c.rec.get(&c.rec.created); len(got) != 0 {
		t.Fatalf("functions created from an untrusted record: %v", got)
	}
}

// Without a registry every registry operation is a conflict, and an
// invocation's import leaves the invocation's own error.
func TestNoRegistry(t *testing.T) {
	ctx := context.Background()
	n := newNode(t, "")
	if n.ChunkCache() != nil || n.Registry() != nil || n.RegistryInfo() != nil {
		t.Fatal("a node without a registry has a store or cache")
	}
	if n.KeyInfo().ID == "" {
		t.Fatal("a node without a registry still has a key")
	}
	for name, err := range map[string]error{
		"push":    func() error { _, err := n.PushSnapshot(ctx, snapID); return err }(),
		"pull":    func() error { _, err := n.PullSnapshot(ctx, wire.PullRequest{Function: "hello"}); return err }(),
		"list":    func() error { _, err := n.ListRegistrySnapshots(ctx); return err }(),
		"delete":  n.DeleteRegistrySnapshot(ctx, snapID),
		"collect": func() error { _, err := n.CollectRegistry(ctx, wire.GCRequest{}); return err }(),
		"refresh": func() error { _, err := n.RefreshFunctions(ctx); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("%s without a registry: %v, want ErrConflict", name, err)
		}
	}
	notHere := fmt.Errorf("function hello: %w", errdefs.ErrNotFound)
	if _, err := n.ImportOnInvoke(ctx, "hello", 0, "", notHere); err != notHere {
		t.Fatalf("import without a registry: %v, want the invocation's error", err)
	}
}

// The node's key is created once and kept: a second start signs with it.
func TestSigningKeyKept(t *testing.T) {
	n := newNode(t, "")
	again, err := New(Config{DataDir: n.dir}, n.d)
	if err != nil {
		t.Fatal(err)
	}
	if again.RegistryKey().ID() != n.RegistryKey().ID() {
		t.Fatalf("key %s after a restart, was %s", again.RegistryKey().ID(), n.RegistryKey().ID())
	}
	if err := CheckTrustedKeys(nil, []string{n.RegistryKey().String()}); err == nil {
		t.Fatal("trusted keys without a registry accepted")
	}
	reg := &registry.Config{Type: registry.TypeFS, Path: t.TempDir()}
	if err := CheckTrustedKeys(reg, []string{"thaw-ed25519 not-base64"}); err == nil {
		t.Fatal("a malformed trusted key accepted")
	}
	if err := CheckTrustedKeys(reg, []string{n.RegistryKey().String()}); err != nil {
		t.Fatal(err)
	}
}

// Err maps the registry's errors to the service's kinds.
func TestErrKinds(t *testing.T) {
	for _, c := range []struct {
		in   error
		want error
	}{
		{syscall.ENOSPC, errdefs.ErrNoSpace},
		{syscall.EDQUOT, errdefs.ErrNoSpace},
		{registry.ErrBusy, errdefs.ErrConflict},
		{registry.ErrVersionConflict, errdefs.ErrConflict},
		{registry.ErrNotFound, errdefs.ErrNotFound},
		{registry.ErrCorrupt, errdefs.ErrSnapshotUnusable},
		{registry.ErrUntrusted, errdefs.ErrSnapshotUnusable},
		{snapshot.ErrMissing, errdefs.ErrSnapshotUnusable},
		{registry.ErrUnavailable, errdefs.ErrRegistryUnavailable},
	} {
		if got := Err(fmt.Errorf("op: %w", c.in)); !errors.Is(got, c.want) {
			t.Errorf("Err(%v) = %v, want %v", c.in, got, c.want)
		}
	}
}

// A collection counts its outcome; a negative grace is refused; the
// registry's snapshots list what was pushed, and a deleted one is gone.
func TestListDeleteCollect(t *testing.T) {
	ctx := context.Background()
	reg := registryDir(t)
	a, _ := published(t, reg, time.Now())
	neg := -1
	if _, err := a.CollectRegistry(ctx, wire.GCRequest{GraceS: &neg}); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("negative grace: %v, want ErrInvalid", err)
	}
	res, err := a.CollectRegistry(ctx, wire.GCRequest{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.DryRun || res.Snapshots != 1 || res.ChunksDeleted != 0 {
		t.Fatalf("dry run = %+v", res)
	}
	list, err := a.ListRegistrySnapshots(ctx)
	if err != nil || len(list) != 1 || list[0].ID != snapID || list[0].SignedBy != a.RegistryKey().ID() {
		t.Fatalf("registry snapshots %+v, %v", list, err)
	}
	if err := a.DeleteRegistrySnapshot(ctx, "nonsense"); err == nil {
		t.Fatal("a malformed id deleted")
	}
	if err := a.DeleteRegistrySnapshot(ctx, snapID); err != nil {
		t.Fatal(err)
	}
	zero := 0
	if res, err = a.CollectRegistry(ctx, wire.GCRequest{GraceS: &zero}); err != nil {
		t.Fatal(err)
	}
	if res.Snapshots != 0 || res.ChunksDeleted == 0 {
		t.Fatalf("collection after the delete = %+v", res)
	}
	if got := a.rec.get(&a.rec.gc); !slices.Equal(got, []string{"dry_run", "ok"}) {
		t.Fatalf("collections counted %v", got)
	}
}

// A directory registry shows as such in the node's info; a push to a full
// filesystem is ErrNoSpace and keeps the local snapshot.
func TestRegistryDirectoryFull(t *testing.T) {
	full := t.TempDir()
	if err := unix.Mount("tmpfs", full, "tmpfs", 0, "size=8k,mode=0700"); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): needs CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(full, unix.MNT_DETACH) })
	a := newNode(t, full)
	if info := a.RegistryInfo(); info == nil || info.Path != full || info.Endpoint != "" || info.CacheDir == "" {
		t.Fatalf("registry info %+v, want the directory", info)
	}
	now := time.Now()
	sn := a.addSnapshot(t, snapID, &catalog.Function{Name: "hello", Digest: digestOf("hello"), MemoryMiB: 4, CreatedAt: now}, now)
	if _, err := a.PushSnapshot(context.Background(), sn.ID); !errors.Is(err, errdefs.ErrNoSpace) {
		t.Fatalf("push to a full directory: %v, want ErrNoSpace", err)
	}
	if _, _, err := snapshot.Check(sn.Dir, nil); err != nil {
		t.Fatalf("local snapshot after a push to a full directory: %v", err)
	}
}
