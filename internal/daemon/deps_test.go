package daemon

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/wire"
)

// withIndex points a test daemon's dependencies at index.
func withIndex(index string, more ...func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Deps = DepsConfig{IndexURL: index, Timeout: 2 * time.Second}
		for _, m := range more {
			m(c)
		}
	}
}

// depsSpec is a function whose directory holds requirements.
func depsSpec(t *testing.T, name, requirements string) FunctionSpec {
	return FunctionSpec{Name: name, Archive: bytes.NewReader(archivetest.TarGz(t,
		archivetest.Entry{Name: "handler.py", Body: "def handle(e): return e\n"},
		archivetest.Entry{Name: RequirementsFile, Body: requirements}))}
}

// A function with a requirements.txt gets its layer: resolved, shown,
// attached as the third disk, recorded by its snapshots; a second
// function with the same set shares the layer without a rebuild; a layer
// that changed on disk or went missing is refused at boot and restore.
func TestFunctionDependencies(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2")
	s, b := fakeService(t, withIndex(ix.URL))
	ctx := context.Background()
	_, sn := bootAndSnapshotSpec(t, s, depsSpec(t, "tables", "texttable>=1.6\n"))
	fn, err := s.GetFunction(ctx, "tables")
	if err != nil {
		t.Fatal(err)
	}
	d := fn.Deps
	if d == nil || len(d.Requested) != 1 || d.Requested[0] != "texttable>=1.6" || len(d.Resolved) != 1 ||
		!strings.HasPrefix(d.Resolved[0], "texttable==1.7.2 --hash=sha256:a381e1ed") || d.Format != "erofs" || d.LayerBytes <= 0 {
		t.Fatalf("deps %+v", d)
	}
	spec := b.Spec(0)
	if len(spec.Disks) != 3 || spec.Disks[2].Path != filepath.Join(s.functions.DepsDir(), "layers", d.Layer, deps.ImageFile) ||
		!spec.Disks[2].ReadOnly || !strings.Contains(spec.Cmdline, " thaw.deps=erofs") {
		t.Fatalf("boot spec disks %+v cmdline %q", spec.Disks, spec.Cmdline)
	}
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.FormatVersion != 2 || m.Inputs.Deps == nil || m.Inputs.Deps.SHA256 != d.LayerSHA256 {
		t.Fatalf("manifest version %d, deps input %+v", m.FormatVersion, m.Inputs.Deps)
	}

	layer := filepath.Join(s.functions.DepsDir(), "layers", d.Layer, deps.ImageFile)
	before, err := os.Stat(layer)
	if err != nil {
		t.Fatal(err)
	}
	createSpec(t, s, depsSpec(t, "tables2", "texttable>=1.6\n"))
	fn2, _ := s.GetFunction(ctx, "tables2")
	after, err := os.Stat(layer)
	if err != nil || fn2.Deps == nil || fn2.Deps.Layer != d.Layer || !os.SameFile(before, after) {
		t.Fatalf("the second function's layer: %+v (same file: %v)", fn2.Deps, err == nil && os.SameFile(before, after))
	}

	// A layer whose image changed: refused at restore and at boot.
	if err := os.WriteFile(layer, append(bytes.Repeat([]byte{0}, int(before.Size())-1), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckSnapshot(ctx, sn.ID); !errors.Is(err, ErrSnapshotUnusable) || !strings.Contains(err.Error(), "dependency layer") {
		t.Fatalf("restore check with a changed layer: %v", err)
	}
	if _, err := s.BootVM(ctx, "tables2"); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "image changed on disk") {
		t.Fatalf("boot with a changed layer: %v", err)
	}
	if err := os.RemoveAll(filepath.Dir(layer)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CheckSnapshot(ctx, sn.ID); !errors.Is(err, ErrSnapshotUnusable) || !strings.Contains(err.Error(), "dependency layer missing") {
		t.Fatalf("restore check without the layer: %v", err)
	}
}

// A handler that cannot be imported fails the boot with the guest's
// traceback; the VM is gone, so nothing can be snapshotted.
func TestBootFailsOnImportError(t *testing.T) {
	s, b := fakeService(t, nil)
	ctx := context.Background()
	createFn(t, s, "broken")
	b.SetFunctionError("ModuleNotFoundError", "No module named 'requests'",
		"Traceback (most recent call last):\n  File \"/fn/broken/handler.py\", line 1, in <module>\n    import requests\nModuleNotFoundError: No module named 'requests'\n")
	_, err := s.BootVM(ctx, "broken")
	if !errors.Is(err, ErrImport) || !errors.Is(err, ErrVMFailed) {
		t.Fatalf("boot = %v, want ErrImport", err)
	}
	for _, want := range []string{"function broken cannot be imported: ModuleNotFoundError: No module named 'requests'", "Traceback (most recent call last)", "handler.py\", line 1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("boot error %q lacks %q", err, want)
		}
	}
	vms, err := s.ListVMs(ctx)
	if err != nil || len(vms) != 1 || vms[0].State != catalog.StateFailed || !strings.Contains(vms[0].Reason, "cannot be imported") {
		t.Fatalf("vms %+v %v", vms, err)
	}
	if _, err := s.CreateSnapshot(ctx, vms[0].ID); !errors.Is(err, ErrConflict) {
		t.Fatalf("snapshot of the failed VM: %v", err)
	}
	if snaps, _ := s.ListSnapshots(ctx, "broken"); len(snaps) != 0 {
		t.Fatalf("snapshots of a broken function: %d", len(snaps))
	}
}

// Layers are collected once nothing uses them: a layer two functions
// share stays while one is left, and goes (within a tiny budget) when the
// last one is deleted.
func TestDependencyLayerCollection(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2")
	s, _ := fakeService(t, withIndex(ix.URL, func(c *Config) { c.Deps.Budget = 1 }))
	ctx := context.Background()
	createSpec(t, s, depsSpec(t, "one", "texttable\n"))
	createSpec(t, s, depsSpec(t, "two", "texttable\n"))
	fn, _ := s.GetFunction(ctx, "one")
	layer := fn.Deps.Layer
	if err := s.DeleteFunction(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	s.functions.CollectDeps(ctx)
	if _, err := s.functions.Deps().Layers.Get(layer); err != nil {
		t.Fatalf("the layer another function uses was collected: %v", err)
	}
	if err := s.DeleteFunction(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.functions.Deps().Layers.Get(layer); errors.Is(err, deps.ErrLayerMissing) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the unused layer was not collected")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ents, _ := os.ReadDir(filepath.Join(s.functions.DepsDir(), "wheels")); len(ents) != 0 {
		t.Errorf("wheels left beyond the budget: %d", len(ents))
	}
}

// A snapshot of a function with dependencies travels with its layer: a
// node that pulls it (by function, lazily too) gets the function with its
// recorded dependencies and the very layer image, without resolving
// anything (its own index does not answer).
func TestPushPullDependencyLayer(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2")
	_, withRegistry := signedRegistry(t, func(c *Config) { c.KeepAlive, c.VMMPool = -1, -1 })
	ctx := context.Background()
	a, _ := fakeService(t, withIndex(ix.URL, withRegistry))
	_, sn := bootAndSnapshotSpec(t, a, depsSpec(t, "tables", "texttable\n"))
	if _, err := a.PushSnapshot(ctx, sn.ID); err != nil {
		t.Fatal(err)
	}
	rm, err := a.reg.Registry().GetManifest(ctx, sn.ID)
	if err != nil {
		t.Fatal(err)
	}
	fnA, _ := a.GetFunction(ctx, "tables")
	if rm.FormatVersion != 2 || rm.Layer == nil || rm.Layer.SHA256 != fnA.Deps.LayerSHA256 || rm.File(registry.LayerPath) == nil {
		t.Fatalf("remote manifest version %d, layer %+v", rm.FormatVersion, rm.Layer)
	}
	for _, lazy := range []bool{false, true} {
		b, _ := fakeService(t, withIndex("http://"+tcptest.FreeAddr(t)+"/simple/", withRegistry))
		pr, err := b.PullSnapshot(ctx, wire.PullRequest{Function: "tables", Lazy: lazy})
		if err != nil {
			t.Fatalf("pull (lazy %v): %v", lazy, err)
		}
		if !pr.FunctionCreated {
			t.Fatalf("pull = %+v", pr)
		}
		fnB, err := b.GetFunction(ctx, "tables")
		if err != nil || fnB.Deps == nil || fnB.Deps.Layer != fnA.Deps.Layer || fnB.Deps.LayerSHA256 != fnA.Deps.LayerSHA256 ||
			strings.Join(fnB.Deps.Resolved, "\n") != strings.Join(fnA.Deps.Resolved, "\n") {
			t.Fatalf("pulled function deps %+v (%v)", fnB.Deps, err)
		}
		l, err := b.functions.Deps().Layers.Get(fnB.Deps.Layer)
		if err != nil || l.SHA256 != fnA.Deps.LayerSHA256 {
			t.Fatalf("pulled layer %+v %v", l, err)
		}
		if _, err := os.Stat(filepath.Join(b.snapshotsDir(), sn.ID, registry.LayerPath)); err == nil {
			t.Error("the layer was written into the snapshot directory")
		}
		if _, err := b.CheckSnapshot(ctx, sn.ID); err != nil {
			t.Fatalf("pulled snapshot does not verify: %v", err)
		}
	}
}

// A deploy builds the layer with the code: the version's frozen
// configuration carries it, its snapshot records it, a deploy of the same
// content changes nothing, and a deploy whose handler cannot be imported
// fails with the traceback and publishes nothing.
func TestDeployDependencies(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2")
	s, b := fakeService(t, withIndex(ix.URL))
	ctx := context.Background()
	res, err := s.Deploy(ctx, DeploySpec{FunctionSpec: depsSpec(t, "tables", "texttable\n")})
	if err != nil {
		t.Fatal(err)
	}
	v, err := s.db.GetVersion(ctx, "tables", res.Version)
	if err != nil || v.Config.Deps == nil || !strings.HasPrefix(v.Config.Deps.Resolved[0], "texttable==1.7.2") {
		t.Fatalf("version %+v %v", v, err)
	}
	sn, err := s.GetSnapshot(ctx, res.Snapshots[0])
	if err != nil {
		t.Fatal(err)
	}
	if m, err := snapshot.ReadManifest(sn.Dir); err != nil || m.Inputs.Deps == nil || m.Inputs.Deps.SHA256 != v.Config.Deps.LayerSHA256 {
		t.Fatalf("the version's snapshot: %+v %v", m, err)
	}
	again, err := s.Deploy(ctx, DeploySpec{FunctionSpec: depsSpec(t, "tables", "texttable\n")})
	if err != nil || !again.Unchanged || again.Version != res.Version {
		t.Fatalf("the same deploy again: %+v %v", again, err)
	}
	b.SetFunctionError("ModuleNotFoundError", "No module named 'requests'", "Traceback (most recent call last):\nModuleNotFoundError: No module named 'requests'\n")
	_, err = s.Deploy(ctx, DeploySpec{FunctionSpec: depsSpec(t, "tables", "texttable>=1.0\n")})
	if !errors.Is(err, ErrImport) || !strings.Contains(err.Error(), "Traceback") {
		t.Fatalf("deploy of a broken handler: %v", err)
	}
	vers, err := s.db.ListVersions(ctx, "tables")
	if err != nil || len(vers) != 1 {
		t.Fatalf("versions after the failed deploy: %d %v", len(vers), err)
	}
}
