package e2e

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
)

// TestRegistryPushPullInvoke: a prepared snapshot pushed to a real MinIO
// (by the prepare itself),
// deleted locally, pulled back and restored under every strategy's data;
// a second daemon that never saw the function pulls it by function name
// and invokes it; with MinIO stopped a push is 503 registry_unavailable
// and the local snapshots still serve.
func TestRegistryPushPullInvoke(t *testing.T) {
	parallel(t)
	srv := miniotest.Start(t)
	withRegistry := func(c *daemon.Config) { cfg := srv.Config; c.Registry = &cfg }
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { withRegistry(c); c.RegistryPushOnPrepare = true })
	c := e.c
	ctx := ctxT(t)
	res := prepareProbe(t, c)
	warm := res.Warm.ID
	push, pc := pushWarmAndClean(t, ctx, c, res)

	invoke := func(c *client.Client, strategy string) {
		t.Helper()
		inv, err := c.InvokeFunction(ctx, "probe", ev(`{"op":"hello","name":"test"}`), client.InvokeOptions{Strategy: strategy, EvictCache: true})
		if err != nil || !inv.OK || !strings.Contains(string(inv.Result), "hello, test!") || inv.Snapshot != warm {
			t.Fatalf("%s invocation after pull: %+v %v", strategy, inv, err)
		}
		if inv.StrategyStats != nil && inv.StrategyStats.Fallback != "" {
			t.Fatalf("%s fell back after pull: %s", strategy, inv.StrategyStats.Fallback)
		}
	}

	// Delete it here and pull it back.
	pullBack(t, ctx, c, warm, push)
	for _, s := range []string{"vanilla", "faasnap", "reap"} {
		invoke(c, s)
	}

	checkUntrustedRefused(t, ctx, withRegistry)

	// A node that never saw the function, trusting e.
	withRegistry = trustingNode(t, e, withRegistry)
	e2 := startEnvWith(t, t.TempDir(), withRegistry)
	pr2, err := e2.c.PullSnapshot(ctx, client.PullRequest{Function: "probe"})
	if err != nil {
		t.Fatalf("pull by function on a new node: %v", err)
	}
	if !pr2.FunctionCreated || pr2.Snapshot.ID != warm {
		t.Fatalf("pull on a new node = %+v (the clean snapshot was pushed after the warm one but is older)", pr2)
	}
	invoke(e2.c, "faasnap")

	// The registry itself: list, delete the clean snapshot, collect its
	// own chunks; the warm one still pulls whole on a third node.
	checkRegistryListAndGC(t, ctx, c, res, pc)
	e3 := startEnvWith(t, t.TempDir(), withRegistry)
	if pr3, err := e3.c.PullSnapshot(ctx, client.PullRequest{Function: "probe"}); err != nil || pr3.Snapshot.ID != warm {
		t.Fatalf("pull after gc = %+v, %v", pr3, err)
	}

	// The store down: a clear 503, nothing lost here.
	srv.Stop()
	_, err = c.PushSnapshot(ctx, res.Clean.ID)
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &apiErr) || apiErr.Code != "registry_unavailable" {
		t.Fatalf("push with the registry down: %v", err)
	}
	invoke(c, "vanilla")
}

// pushWarmAndClean pushes the prepared warm snapshot again (the prepare
// pushed it: nothing is uploaded) and the clean one, which shares most
// chunks with it.
func pushWarmAndClean(t *testing.T, ctx context.Context, c *client.Client, res *client.PrepareResult) (*client.PushResult, *client.PushResult) {
	t.Helper()
	warm := res.Warm.ID
	push, err := c.PushSnapshot(ctx, warm)
	if err != nil {
		t.Fatalf("push: %v", err)
	}
	t.Logf("pushed %s: %d chunks, %d MiB stored of %d MiB data, %.0f ms", warm, push.Chunks,
		push.StoredBytes>>20, push.DataBytes>>20, push.PushMS)
	// --registry-push-on-prepare pushed it already: nothing left to upload.
	if push.Chunks == 0 || push.Uploaded != 0 || push.StoredBytes >= push.DataBytes {
		t.Fatalf("push after an automatic push = %+v", push)
	}
	// The clean snapshot shares most chunks with the warm one.
	pc, err := c.PushSnapshot(ctx, res.Clean.ID)
	if err != nil {
		t.Fatalf("push clean: %v", err)
	}
	// The warm snapshot was taken after the function ran (page cache,
	// heap): about half of the clean one's chunks are shared (49-51%
	// measured); a third at least, or deduplication is broken.
	if pc.Uploaded*3 > pc.Chunks*2 {
		t.Fatalf("clean snapshot push uploaded %d of %d chunks: little shared with the warm one", pc.Uploaded, pc.Chunks)
	}
	t.Logf("clean snapshot push: %d of %d chunks uploaded, the rest shared with the warm one", pc.Uploaded, pc.Chunks)
	return push, pc
}

// pullBack deletes warm here and pulls it back; it verifies.
func pullBack(t *testing.T, ctx context.Context, c *client.Client, warm string, push *client.PushResult) {
	t.Helper()
	if err := c.DeleteSnapshot(ctx, warm); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PullSnapshot(ctx, client.PullRequest{Snapshot: "snap-000000000000"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("pull of a snapshot never pushed: %v", err)
	}
	pr, err := c.PullSnapshot(ctx, client.PullRequest{Snapshot: warm})
	if err != nil {
		t.Fatalf("pull: %v", err)
	}
	if pr.Snapshot.ID != warm || pr.FunctionCreated || pr.Snapshot.Prepared == nil || pr.CachedChunks+pr.FetchedChunks < int64(push.Chunks) {
		t.Fatalf("pull = %+v", pr)
	}
	if _, err := c.PullSnapshot(ctx, client.PullRequest{Snapshot: warm}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("pull of a snapshot already here: %v", err)
	}
	if _, err := c.VerifySnapshot(ctx, warm); err != nil {
		t.Fatalf("pulled snapshot does not verify: %v", err)
	}
}

// checkUntrustedRefused: a node that does not trust the publisher's key
// refuses what it published, over the API, before anything is fetched or
// entered.
func checkUntrustedRefused(t *testing.T, ctx context.Context, withRegistry func(*daemon.Config)) {
	t.Helper()
	stranger := startEnvWith(t, t.TempDir(), withRegistry)
	_, err := stranger.c.InvokeFunction(ctx, "probe", ev(`{"op":"hello","name":"test"}`), client.InvokeOptions{})
	var refused *client.APIError
	if !errors.As(err, &refused) || refused.Code != "snapshot_unusable" || !strings.Contains(err.Error(), "does not trust") {
		t.Fatalf("import from an untrusted node: %v", err)
	}
	if fns, err := stranger.c.ListFunctions(ctx); err != nil || len(fns) != 0 {
		t.Fatalf("a refused import left functions %+v, %v", fns, err)
	}
	noLiveVM(t, stranger)
}

// checkRegistryListAndGC: the registry lists both snapshots signed by
// this node, the warm one latest; deleting the clean one and collecting
// deletes its own chunks.
func checkRegistryListAndGC(t *testing.T, ctx context.Context, c *client.Client, res *client.PrepareResult, pc *client.PushResult) {
	t.Helper()
	warm := res.Warm.ID
	list, err := c.ListRegistrySnapshots(ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("registry list = %+v, %v", list, err)
	}
	info, err := c.Info(ctx)
	if err != nil || info.RegistryKey == nil {
		t.Fatalf("info: %+v %v", info, err)
	}
	for _, s := range list {
		if s.Latest != (s.ID == warm) {
			t.Fatalf("registry list marks %s latest=%v; the function's newest is %s", s.ID, s.Latest, warm)
		}
		if s.SignedBy != info.RegistryKey.ID || s.Refused != "" {
			t.Fatalf("registry list: %s signed by %q (this node is %s), refused %q", s.ID, s.SignedBy, info.RegistryKey.ID, s.Refused)
		}
	}
	if err := c.DeleteRegistrySnapshot(ctx, res.Clean.ID); err != nil {
		t.Fatal(err)
	}
	zero := 0
	gcr, err := c.CollectRegistry(ctx, client.GCRequest{GraceS: &zero})
	if err != nil || gcr.Snapshots != 1 || gcr.ChunksDeleted == 0 || gcr.ChunksDeleted > pc.Uploaded {
		t.Fatalf("registry gc = %+v, %v (the clean snapshot uploaded %d chunks of its own)", gcr, err, pc.Uploaded)
	}
	t.Logf("registry gc: %d of %d chunks deleted, %d KiB", gcr.ChunksDeleted, gcr.Chunks, gcr.BytesDeleted>>10)
}

// trustingNode is edit, then trust of the key publisher's daemon shows in
// GET /v1/info (as an operator copies it into --registry-trusted-keys).
func trustingNode(t *testing.T, publisher *env, edit func(*daemon.Config)) func(*daemon.Config) {
	t.Helper()
	info, err := publisher.c.Info(ctxT(t))
	if err != nil || info.RegistryKey == nil {
		t.Fatalf("publisher's registry key: %+v %v", info, err)
	}
	return func(c *daemon.Config) {
		edit(c)
		c.RegistryTrustedKeys = append(c.RegistryTrustedKeys, info.RegistryKey.PublicKey)
	}
}
