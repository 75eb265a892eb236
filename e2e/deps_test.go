package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

// depsIndex serves the real Chameleon, igraph and texttable wheels, a
// pyaes wheel made here that shadows the guest image's pyaes, and a wheel
// whose .pth file puts a directory on sys.path.
func depsIndex(t *testing.T) *pypitest.Index {
	t.Helper()
	dir := t.TempDir()
	pypitest.Copy(t, dir, "Chameleon-4.6.0", "igraph-1.0.0", "texttable-1.7.2")
	pypitest.Wheel{Name: "pyaes", Version: "99.0", Files: map[string]string{
		"pyaes/__init__.py": "VERSION = 'from the layer'\n"}}.Write(t, dir)
	pypitest.Wheel{Name: "thaw_pth_probe", Version: "1.0", Files: map[string]string{
		"thaw_pth_probe.pth":                   "thaw_pth_extra\n",
		"thaw_pth_extra/thaw_pth_probe.py":     "import os\nWHERE = os.path.dirname(__file__)\n",
		"thaw_pth_probe-1.0.dist-info/LICENSE": "public domain\n"}}.Write(t, dir)
	return pypitest.Start(t, dir)
}

// writeFunction copies a function of e2e/testdata into a directory of
// its own with a requirements.txt.
func writeFunction(t *testing.T, from, requirements string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), filepath.Base(from))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(repoPath(filepath.Join("e2e/testdata", from, "handler.py")))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if requirements != "" {
		if err := os.WriteFile(filepath.Join(dir, "requirements.txt"), []byte(requirements), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A function with a pure-Python and a C-extension dependency: created
// (resolved against a real index), booted with its layer, snapshotted;
// its cold invocation imports and uses both, and the layer sits right
// after the function's directory, ahead of the image's packages, with its
// .pth files processed. A second function with the same set reuses the
// layer. A handler whose import fails fails its boot with the traceback,
// and nothing of it can be snapshotted.
func TestFunctionDependencies(t *testing.T) {
	parallel(t)
	ix := depsIndex(t)
	dataDir := t.TempDir()
	e := startEnvWith(t, dataDir, func(c *daemon.Config) { c.Deps.IndexURL = ix.URL })
	ctx := ctxT(t)
	c := e.c
	reqs := "chameleon>=4\nigraph==1.0.0\npyaes==99.0\nthaw-pth-probe\n"
	fn, err := c.CreateFunctionFromDir(ctx, "tables", writeFunction(t, "deps/tables", reqs), 256, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := fn.Deps
	if d == nil || len(d.Requested) != 4 || len(d.Resolved) != 5 || d.Format != "erofs" || d.LayerBytes <= 0 ||
		!strings.HasPrefix(d.Resolved[0], "chameleon==4.6.0 --hash=sha256:") || !strings.HasPrefix(d.Resolved[4], "thaw-pth-probe==1.0 --hash=") {
		t.Fatalf("deps %+v", d)
	}
	t.Logf("layer %s: %d bytes, %d wheels", d.Layer[:12], d.LayerBytes, len(d.Resolved))
	layer := filepath.Join(dataDir, "deps", "layers", d.Layer, "layer.img")
	before, err := os.Stat(layer)
	if err != nil {
		t.Fatal(err)
	}

	vm, err := c.BootVM(ctx, "tables")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to agent ready (imports included): %.0f ms", vm.BootMS)
	sn, err := c.CreateSnapshot(ctx, vm.ID)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	inv, err := c.InvokeFunction(ctx, "tables", ev(`{"n":12}`), client.InvokeOptions{Snapshot: sn.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !inv.OK || inv.Mode != "cold" {
		t.Fatalf("cold invocation: %+v", inv)
	}
	checkDepsResult(t, inv)

	// The same set for another function: the same layer, not rebuilt.
	fn2, err := c.CreateFunctionFromDir(ctx, "tables2", writeFunction(t, "deps/tables", reqs), 256, 1)
	if err != nil {
		t.Fatal(err)
	}
	after, err := os.Stat(layer)
	if err != nil || fn2.Deps == nil || fn2.Deps.Layer != d.Layer || !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("second function: layer %+v, same file %v", fn2.Deps, err == nil && os.SameFile(before, after))
	}

	checkBrokenImport(t, ctx, c)
}

// checkDepsResult checks the cold invocation imported and used both
// dependencies, and that the layer sits right after the function's
// directory, ahead of the image's packages, with its .pth files processed
// and mounted read-only.
func checkDepsResult(t *testing.T, inv *client.Invocation) {
	t.Helper()
	var got struct {
		HTML    string   `json:"html"`
		RankSum float64  `json:"rank_sum"`
		IGraph  string   `json:"igraph"`
		PyAES   []string `json:"pyaes"`
		PTH     string   `json:"pth"`
		Path    []string `json:"path"`
		Mount   []string `json:"mount"`
	}
	if err := json.Unmarshal(inv.Result, &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("result %s; restore set-up %.1f ms", inv.Result, inv.Timing.Restore.SetupMS)
	if got.RankSum != 1 || got.IGraph != "1.0.0" || strings.Count(got.HTML, "<li>") != 3 {
		t.Errorf("igraph and Chameleon: %+v", got)
	}
	if len(got.PyAES) != 2 || got.PyAES[0] != "from the layer" || !strings.HasPrefix(got.PyAES[1], "/deps/site/pyaes/") {
		t.Errorf("the layer's pyaes does not come before the image's: %v", got.PyAES)
	}
	if got.PTH != "/deps/site/thaw_pth_extra" {
		t.Errorf("the .pth file's directory: %q", got.PTH)
	}
	if len(got.Path) != 3 || got.Path[0] != "/fn/tables" || got.Path[1] != "/deps/site" || got.Path[2] != "/deps/site/thaw_pth_extra" {
		t.Errorf("sys.path starts %v", got.Path)
	}
	mount := strings.Join(got.Mount, " ")
	for _, want := range []string{"/dev/vdc erofs", " ro", " nosuid", " nodev"} {
		if !strings.Contains(mount, want) {
			t.Errorf("/deps is mounted %q, want %q in it", mount, want)
		}
	}
}

// checkBrokenImport: a handler that cannot be imported fails its boot,
// with the traceback, and nothing of it can be snapshotted.
func checkBrokenImport(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	if _, err := c.CreateFunctionFromDir(ctx, "broken", writeFunction(t, "deps/broken", ""), 256, 1); err != nil {
		t.Fatal(err)
	}
	_, err := c.BootVM(ctx, "broken")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 502 || ae.Code != "import_failed" {
		t.Fatalf("boot of a broken function: %v", err)
	}
	for _, want := range []string{"cannot be imported: ModuleNotFoundError: No module named 'requests'", "Traceback (most recent call last)", "/fn/broken/handler.py"} {
		if !strings.Contains(ae.Message, want) {
			t.Errorf("boot error lacks %q:\n%s", want, ae.Message)
		}
	}
	if snaps, err := c.ListSnapshots(context.Background(), "broken"); err != nil || len(snaps) != 0 {
		t.Fatalf("snapshots of the broken function: %v %v", snaps, err)
	}
	vms, err := c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.Function == "broken" && v.State != "failed" {
			t.Errorf("broken function's vm %s is %s", v.ID, v.State)
		}
	}
}
