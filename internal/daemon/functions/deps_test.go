package functions

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// withIndex points the component's dependencies at index.
func withIndex(index string, more ...func(*Config)) func(*Config) {
	return func(c *Config) {
		c.Deps = DepsConfig{IndexURL: index, Timeout: 2 * time.Second}
		for _, m := range more {
			m(c)
		}
	}
}

// depsSpec is a function whose directory holds requirements.
func depsSpec(t *testing.T, name, requirements string) Spec {
	return Spec{Name: name, Archive: bytes.NewReader(archivetest.TarGz(t,
		archivetest.Entry{Name: "handler.py", Body: "def handle(e): return e\n"},
		archivetest.Entry{Name: RequirementsFile, Body: requirements}))}
}

// Requirements that cannot be satisfied fail the create with a clear
// error and leave nothing: no function, no code directory, no layer, no
// temporary files.
func TestFunctionDependenciesRefused(t *testing.T) {
	dir := t.TempDir()
	pypitest.Copy(t, dir, "pyaes-1.6.1", "texttable-1.7.2")
	pypitest.Wheel{Name: "wrongpy", Version: "1.0", Tag: "cp312-cp312-manylinux_2_17_x86_64"}.Write(t, dir)
	pypitest.Wheel{Name: "conflicta", Version: "1.0", Requires: []string{"conflictb==2.0"}}.Write(t, dir)
	pypitest.Wheel{Name: "conflictb", Version: "1.0"}.Write(t, dir)
	pypitest.Wheel{Name: "conflictb", Version: "2.0"}.Write(t, dir)
	for name, files := range map[string]map[string]string{
		"dotdot":   {"../escape.py": "x"},
		"absolute": {"/etc/evil.py": "x"},
		"huge":     {"huge/big.bin": "x"},
	} {
		w := pypitest.Wheel{Name: name, Version: "1.0", Files: files}
		if name == "huge" {
			w.DeclaredSize = map[string]uint64{"huge/big.bin": deps.MaxEntryBytes + 1}
		}
		w.Write(t, dir)
	}
	pypitest.Wheel{Name: "linkout", Version: "1.0", Symlinks: map[string]string{"linkout/passwd": "/etc/passwd"}}.Write(t, dir)
	pypitest.Wheel{Name: "badrecord", Version: "1.0", EditRecord: func(lines []string) []string {
		for i, l := range lines {
			if strings.HasPrefix(l, "badrecord/__init__.py,") {
				lines[i] = "badrecord/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,16"
			}
		}
		return lines
	}}.Write(t, dir)
	ix := pypitest.Start(t, dir)
	s, _ := newManager(t, withIndex(ix.URL))
	silent := tcptest.Serve(t, func(c net.Conn, _ int) { defer c.Close(); time.Sleep(30 * time.Second) })
	down, _ := newManager(t, withIndex("http://"+silent.String()+"/simple/"))
	for _, tc := range []struct {
		svc          *Manager
		requirements string
		kind         error
		parts        []string
	}{
		{s, "nosuchpkg\n", deps.ErrUnknownPackage, []string{"nosuchpkg"}},
		{s, "conflicta==1.0\nconflictb==1.0\n", deps.ErrConflict, []string{"conflicta 1.0 depends on conflictb==2.0"}},
		{s, "pyaes==1.6.1\n", deps.ErrSdistOnly, []string{"pyaes 1.6.1", "pyaes-1.6.1.tar.gz"}},
		{s, "wrongpy==1.0\n", deps.ErrNoWheel, []string{"wrongpy 1.0", "cp312"}},
		{s, "dotdot\n", deps.ErrBadWheel, []string{"dotdot-1.0-py3-none-any.whl", "../escape.py"}},
		{s, "absolute\n", deps.ErrBadWheel, []string{"absolute-1.0-py3-none-any.whl", "/etc/evil.py"}},
		{s, "linkout\n", deps.ErrBadWheel, []string{"linkout/passwd", "symbolic link"}},
		{s, "huge\n", deps.ErrBadWheel, []string{"huge/big.bin", "more than 256 MiB"}},
		{s, "badrecord\n", deps.ErrBadWheel, []string{`"badrecord/__init__.py"`, "does not match its sha256 in RECORD"}},
		{s, "-i http://evil/simple\n", deps.ErrInvalid, []string{"option -i is not allowed"}},
		{down, "texttable\n", deps.ErrIndexUnavailable, []string{"did not answer"}},
	} {
		_, err := tc.svc.CreateFunction(context.Background(), depsSpec(t, "refused", tc.requirements))
		if !errors.Is(err, tc.kind) {
			t.Errorf("%q: %v, want %v", tc.requirements, err, tc.kind)
			continue
		}
		wantClass := errdefs.ErrInvalid
		if tc.kind == deps.ErrIndexUnavailable {
			wantClass = errdefs.ErrIndexUnavailable
		}
		if !errors.Is(err, wantClass) {
			t.Errorf("%q: %v is not %v", tc.requirements, err, wantClass)
		}
		for _, p := range tc.parts {
			if !strings.Contains(err.Error(), p) {
				t.Errorf("%q: error %q does not mention %q", tc.requirements, err, p)
			}
		}
		assertNothingLeft(t, tc.svc)
	}
}

// assertNothingLeft: no function, code directory, layer or temporary file.
func assertNothingLeft(t *testing.T, s *Manager) {
	t.Helper()
	if fns, _ := s.ListFunctions(context.Background()); len(fns) != 0 {
		t.Errorf("function rows left: %d", len(fns))
	}
	for _, dir := range []string{s.FunctionsDir(), filepath.Join(s.DepsDir(), "layers"), filepath.Join(s.DepsDir(), "tmp")} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			t.Errorf("left in %s: %s", dir, e.Name())
		}
	}
	if _, err := os.Stat(filepath.Join(s.DepsDir(), "escape.py")); err == nil {
		t.Error("a wheel entry escaped its layer")
	}
}

// tablesFunction is a manager whose package index serves texttable 1.7.2,
// and its function tables with requirements.txt requirements.
func tablesFunction(t *testing.T, requirements string) (*Manager, *fakeDaemon, *catalog.Function) {
	t.Helper()
	ix := pypitest.Serve(t, "texttable-1.7.2")
	m, f := newManager(t, withIndex(ix.URL))
	fn, err := m.CreateFunction(context.Background(), depsSpec(t, "tables", requirements))
	if err != nil {
		t.Fatal(err)
	}
	return m, f, fn
}

// A function with a requirements.txt gets its layer, attached to its VMs
// as the disk after the code disk; a second function with the same set
// shares it; a layer that changed on disk is refused.
func TestFunctionDependencies(t *testing.T) {
	m, f, fn := tablesFunction(t, "texttable>=1.6\n")
	ctx := context.Background()
	d := fn.Deps
	if d == nil || !slices.Equal(d.Requested, []string{"texttable>=1.6"}) || len(d.Resolved) != 1 ||
		!strings.HasPrefix(d.Resolved[0], "texttable==1.7.2 --hash=sha256:") || d.Format != "erofs" || d.LayerBytes <= 0 {
		t.Fatalf("deps %+v", d)
	}
	if !slices.Contains(f.phases, "dependencies") {
		t.Errorf("phases %v", f.phases)
	}
	spec := vmm.Spec{Disks: []vmm.Disk{{Path: "root"}, {Path: "code"}}, Cmdline: "console=ttyS0"}
	m.AttachDeps(&spec, fn)
	layer := filepath.Join(m.DepsDir(), "layers", d.Layer, deps.ImageFile)
	if len(spec.Disks) != 3 || spec.Disks[2] != (vmm.Disk{Path: layer, ReadOnly: true}) || spec.Cmdline != "console=ttyS0 thaw.deps=erofs" {
		t.Fatalf("spec %+v", spec)
	}
	fn2, err := m.CreateFunction(ctx, depsSpec(t, "tables2", "texttable>=1.6\n"))
	if err != nil || fn2.Deps == nil || fn2.Deps.Layer != d.Layer {
		t.Fatalf("the second function's deps: %+v %v", fn2, err)
	}
	if l, err := m.LayerOf(fn); err != nil || l.SHA256 != d.LayerSHA256 {
		t.Fatalf("layer %+v %v", l, err)
	}
	st, err := os.Stat(layer)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(layer, append(bytes.Repeat([]byte{0}, int(st.Size())-1), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LayerOf(fn2); !errors.Is(err, deps.ErrLayerMissing) || !strings.Contains(err.Error(), "image changed on disk") {
		t.Fatalf("a changed layer: %v", err)
	}
}

// Layers are collected once nothing uses them: a layer two functions
// share stays while one is left, and goes (within a tiny budget) when the
// last one is gone.
func TestDependencyLayerCollection(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2")
	m, _ := newManager(t, withIndex(ix.URL, func(c *Config) { c.Deps.Budget = 1 }))
	ctx := context.Background()
	var layer string
	for _, name := range []string{"one", "two"} {
		fn, err := m.CreateFunction(ctx, depsSpec(t, name, "texttable\n"))
		if err != nil {
			t.Fatal(err)
		}
		layer = fn.Deps.Layer
	}
	if err := m.d.Catalog.DeleteFunction(ctx, "one"); err != nil {
		t.Fatal(err)
	}
	m.CollectDeps(ctx)
	if _, err := m.Deps().Layers.Get(layer); err != nil {
		t.Fatalf("the layer another function uses was collected: %v", err)
	}
	if err := m.d.Catalog.DeleteFunction(ctx, "two"); err != nil {
		t.Fatal(err)
	}
	m.CollectDeps(ctx)
	if _, err := m.Deps().Layers.Get(layer); !errors.Is(err, deps.ErrLayerMissing) {
		t.Fatalf("the unused layer was not collected: %v", err)
	}
	if ents, _ := os.ReadDir(filepath.Join(m.DepsDir(), "wheels")); len(ents) != 0 {
		t.Errorf("wheels left beyond the budget: %d", len(ents))
	}
}

// A pulled layer is adopted whole from the registry (PullFile), only
// once; a remote layer of the same digest but another image is refused.
func TestPullLayer(t *testing.T) {
	a, _, fn := tablesFunction(t, "texttable\n")
	ctx := context.Background()
	pushed, file, err := a.PushedLayer(fn)
	if err != nil || pushed.SHA256 != fn.Deps.LayerSHA256 {
		t.Fatalf("pushed layer %+v %v", pushed, err)
	}
	b, fb := newManager(t, withIndex("http://"+tcptest.FreeAddr(t)+"/simple/"))
	img, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	remote := filepath.Join(fb.remote, registry.LayerPath)
	if err := os.MkdirAll(filepath.Dir(remote), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(remote, img, 0o600); err != nil {
		t.Fatal(err)
	}
	rm := &registry.RemoteManifest{ID: "snap-000000000001", Layer: pushed}
	if err := b.PullLayer(ctx, rm); err != nil {
		t.Fatal(err)
	}
	if l, err := b.LayerOf(&catalog.Function{Name: "tables", Deps: fn.Deps}); err != nil || l.SHA256 != pushed.SHA256 {
		t.Fatalf("pulled layer %+v %v", l, err)
	}
	if err := os.Remove(remote); err != nil {
		t.Fatal(err)
	}
	if err := b.PullLayer(ctx, rm); err != nil {
		t.Fatalf("a layer already here is fetched again: %v", err)
	}
	other := *pushed
	other.SHA256 = strings.Repeat("0", 64)
	if err := b.PullLayer(ctx, &registry.RemoteManifest{ID: "snap-000000000002", Layer: &other}); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("another image of the digest: %v", err)
	}
}

func TestCheckDepsInput(t *testing.T) {
	with := &catalog.Function{Deps: &catalog.Deps{LayerSHA256: "aaaa"}}
	without := &catalog.Function{}
	manifest := func(sha string) *snapshot.Manifest {
		m := &snapshot.Manifest{}
		if sha != "" {
			m.Inputs.Deps = &snapshot.Digest{SHA256: sha}
		}
		return m
	}
	for _, tc := range []struct {
		m    *snapshot.Manifest
		fn   *catalog.Function
		want string
	}{
		{manifest(""), without, ""},
		{manifest("aaaa"), with, ""},
		{manifest(""), with, "taken without the function's dependency layer"},
		{manifest("aaaa"), without, "the function none"},
		{manifest("bbbb"), with, "digest differs"},
	} {
		err := CheckDepsInput(tc.m, tc.fn)
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, snapshot.ErrIncompatible) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("manifest %+v, function %+v: %v, want %q", tc.m.Inputs.Deps, tc.fn.Deps, err, tc.want)
		}
	}
}
