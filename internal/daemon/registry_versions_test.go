package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// Versions through the registry, on the fake VMM and a real MinIO: node a
// deploys two versions and pushes them; node b, which never saw the
// function, runs NAME:2 (imported under the same number, with live on
// it), then NAME:1 (other code: built beside the function's), and an
// unqualified pull on a third node enters the newest version. A version
// record that is tampered with is refused; the same number with other
// content is refused on push and on pull; retention deletes the record.
func TestVersionsThroughRegistry(t *testing.T) {
	ctx := context.Background()
	srv, withRegistry := signedRegistry(t)
	a, _ := fakeService(t, withRegistry)
	v1, v2 := deployApp(t, a, "def handle(e): return 1\n"), deployApp(t, a, "def handle(e): return 2\n")
	for _, d := range []*DeployResult{v1, v2} {
		if _, err := a.PushSnapshot(ctx, d.Snapshots[0]); err != nil {
			t.Fatal(err)
		}
	}
	digests := map[int]string{}
	for _, n := range []int{1, 2} {
		v, err := a.GetVersion(ctx, "app", n)
		if err != nil {
			t.Fatal(err)
		}
		digests[n] = v.Digest
	}

	b, _ := fakeService(t, withRegistry)
	inv := invokeRef(t, b, "app:2")
	if inv.Version != 2 || inv.Timing.ImportMS <= 0 || inv.Snapshot != v2.Snapshots[0] {
		t.Fatalf("app:2 on b: version %d import %.1f ms snapshot %s", inv.Version, inv.Timing.ImportMS, inv.Snapshot)
	}
	checkVersion := func(s *Service, n int) {
		t.Helper()
		v, err := s.GetVersion(ctx, "app", n)
		if err != nil || v.Digest != digests[n] {
			t.Fatalf("version %d on the importing node: %v %+v", n, err, v)
		}
	}
	checkVersion(b, 2)
	if a, err := b.GetAlias(ctx, "app", versions.Live); err != nil || !bytes.Contains(a.Routing, []byte(`"version":2`)) {
		t.Fatalf("live on the importing node: %v %+v", err, a)
	}
	checkOtherCodeVersion(t, b, v1.Snapshots[0])
	checkVersion(b, 1)

	// An unqualified pull on a node that never saw the function enters the
	// newest pushed version.
	c, _ := fakeService(t, withRegistry)
	pr, err := c.PullSnapshot(ctx, wire.PullRequest{Function: "app"})
	if err != nil || pr.Snapshot.ID != v2.Snapshots[0] {
		t.Fatalf("pull app: %v %+v", err, pr)
	}
	checkVersion(c, 2)

	checkConflictingVersion(t, withRegistry, v2.Snapshots[0])
	e, _ := fakeService(t, withRegistry)
	checkTamperedVersion(t, srv, e)
	// Collection keeps the code archive only version 1's record names
	// (the function record names version 2's).
	if _, err := a.reg.Registry().GC(ctx, registry.GCOptions{}); err != nil {
		t.Fatal(err)
	}
	if pr, err := e.PullSnapshot(ctx, wire.PullRequest{Function: "app", Version: 1}); err != nil || pr.Snapshot.ID != v1.Snapshots[0] {
		t.Fatalf("pull of version 1 after a collection: %v %+v", err, pr)
	}

	// Retention collects version 1 on its node, and its record goes.
	a.cfg.VersionKeep = 1
	a.versions = a.newVersions(a.reg.Registry()) // the component takes its settings when made
	a.versions.CollectVersions(ctx, "app")
	if _, err := a.reg.Registry().GetVersion(ctx, "app", 1); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("collected version's record: %v", err)
	}
	if _, err := a.reg.Registry().GetVersion(ctx, "app", 2); err != nil {
		t.Fatalf("kept version's record: %v", err)
	}
}

// invokeRef invokes ref cold on s from its cached snapshot.
func invokeRef(t *testing.T, s *Service, ref string) *Invocation {
	t.Helper()
	inv, err := s.InvokeCold(context.Background(), ColdRequest{Function: ref, Strategy: "cached", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{}`)}})
	if err != nil || !inv.OK {
		t.Fatalf("invoke %s: %v %+v", ref, err, inv)
	}
	return inv
}

// checkOtherCodeVersion checks that version 1 of app, whose code differs
// from the function's, is built beside it on b and restores from v1Snap
// with it, live staying on 2, and that a version in no registry is not
// found.
func checkOtherCodeVersion(t *testing.T, b *Service, v1Snap string) {
	t.Helper()
	ctx := context.Background()
	if inv := invokeRef(t, b, "app:1"); inv.Version != 1 || inv.Snapshot != v1Snap {
		t.Fatalf("app:1 on b: %+v", inv)
	}
	v1b, _ := b.GetVersion(ctx, "app", 1)
	fn, _ := b.GetFunction(ctx, "app")
	if v1b.Config.CodeDir == fn.CodeDir || v1b.Config.Digest == fn.Digest {
		t.Fatalf("version 1 shares the function's code: %s", v1b.Config.CodeDir)
	}
	if _, err := os.Stat(filepath.Join(v1b.Config.CodeDir, "app", "handler.py")); err != nil {
		t.Fatal(err)
	}
	if inv := invokeRef(t, b, "app"); inv.Version != 2 {
		t.Fatalf("app on b after importing 1 runs version %d", inv.Version)
	}
	if _, err := b.InvokeCold(ctx, ColdRequest{Function: "app:3", Strategy: "cached", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{}`)}}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("app:3, in no registry: %v", err)
	}
}

// deployApp deploys app with a handler of body on s.
func deployApp(t *testing.T, s *Service, body string) *DeployResult {
	t.Helper()
	res, err := s.Deploy(context.Background(), DeploySpec{FunctionSpec: FunctionSpec{Name: "app",
		Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: body}))}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// checkConflictingVersion checks that the same version number with other
// content is refused on push (a node that deployed on its own) and on
// pull (a node holding another version 2, whose snapshot is v2Snap
// elsewhere).
func checkConflictingVersion(t *testing.T, withRegistry func(*Config), v2Snap string) {
	t.Helper()
	ctx := context.Background()
	d, _ := fakeService(t, withRegistry)
	deployApp(t, d, "def handle(e): return 'd1'\n")
	d2 := deployApp(t, d, "def handle(e): return 'd2'\n")
	if _, err := d.PushSnapshot(ctx, d2.Snapshots[0]); !errors.Is(err, ErrConflict) {
		t.Fatalf("push of another version 2: %v", err)
	}
	if _, err := d.PullSnapshot(ctx, wire.PullRequest{Function: "app", Version: 2}); !errors.Is(err, ErrConflict) {
		t.Fatalf("pull of version 2 onto another version 2: %v", err)
	}
	if _, err := d.GetSnapshot(ctx, v2Snap); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused pull left its snapshot: %v", err)
	}
}

// checkTamperedVersion checks that a version record changed after signing
// is refused by e's pull, and nothing is entered; it puts the record back.
func checkTamperedVersion(t *testing.T, srv *miniotest.Server, e *Service) {
	t.Helper()
	ctx := context.Background()
	key := "versions/app/1.json"
	raw := srv.Get(t, key)
	var env signing.Envelope
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	env.Payload = bytes.Replace(env.Payload, []byte(`"memory_mib":`), []byte(`"memory_mib":1`), 1)
	forged, _ := json.Marshal(env)
	srv.Put(t, key, forged)
	if _, err := e.PullSnapshot(ctx, wire.PullRequest{Function: "app", Version: 1}); !errors.Is(err, ErrSnapshotUnusable) {
		t.Fatalf("pull of a tampered version record: %v", err)
	}
	if _, err := e.GetFunction(ctx, "app"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused pull created the function: %v", err)
	}
	srv.Put(t, key, raw)
}
