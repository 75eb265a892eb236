package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
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
	srv := miniotest.Start(t)
	withRegistry := func(c *Config) { cfg := srv.Config; c.Registry = &cfg }
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
