package e2e

import (
	"encoding/json"

	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

// TestMeasureDependencyLayers is a measurement, not a test: it only runs
// with THAW_DEPS_MEASURE=1 and reports (docs/benchmarks.md, "Dependency
// layers"); it fails only if something does not work. For two real sets
// (igraph + Chameleon; requests and its four dependencies) and each layer
// variant (ext4, erofs uncompressed, lz4, lz4hc) it reports the image size,
// the build time and the first import in a real guest (median of
// THAW_DEPS_MEASURE_REPS boots, default 3; the variants interleaved so load
// from elsewhere spreads over all of them), the import without the
// precompiled bytecode (erofs lz4), and the restore set-up of a function
// with a layer against one without (median of THAW_DEPS_MEASURE_COLD cold
// starts each, default 20, alternating).
func TestMeasureDependencyLayers(t *testing.T) {
	if os.Getenv("THAW_DEPS_MEASURE") != "1" {
		t.Skip("a measurement: set THAW_DEPS_MEASURE=1 (and THAW_IMAGE)")
	}
	reps, cold := envInt("THAW_DEPS_MEASURE_REPS", 3), envInt("THAW_DEPS_MEASURE_COLD", 20)
	ix := pypitest.Serve(t, "Chameleon-4.6.0", "igraph-1.0.0", "texttable-1.7.2", "requests-2.32.3", "urllib3-2.8.0",
		"idna-3.20", "certifi-2026.10.19", "charset_normalizer-3.5.3")
	ctx := ctxT(t)
	sets := []struct{ name, requirements, imports string }{
		{"igraph-chameleon", "chameleon==4.6.0\nigraph==1.0.0\n", "igraph, chameleon"},
		{"requests", "requests==2.32.3\n", "requests"},
	}
	type variant struct {
		name, format, compression string
		e                         *env
	}
	variants := []*variant{{name: "ext4", format: "ext4"}, {name: "erofs", format: "erofs", compression: "none"},
		{name: "erofs-lz4", format: "erofs", compression: "lz4"}, {name: "erofs-lz4hc", format: "erofs", compression: "lz4hc"}}
	imports := map[string][]float64{} // variant/set[/nopyc] -> import ms per boot
	for _, v := range variants {
		dataDir := t.TempDir()
		v.e = startEnvWith(t, dataDir, func(c *daemon.Config) {
			c.Deps = daemon.DepsConfig{IndexURL: ix.URL, Format: v.format, Compression: v.compression}
		})
		for _, s := range sets {
			fns := []string{s.name}
			if v.name == "erofs-lz4" {
				fns = append(fns, s.name+"-nopyc")
			}
			for _, fn := range fns {
				f, err := v.e.c.CreateFunctionFromDir(ctx, fn, importProbe(t, s.imports, s.requirements, strings.HasSuffix(fn, "-nopyc")), 512, 1)
				if err != nil {
					t.Fatal(err)
				}
				info := layerInfo(t, dataDir, f.Deps.Layer)
				t.Logf("%s %s: image %d bytes (%.1f MiB), %d files, build %.0f ms %v", v.name, fn, f.Deps.LayerBytes,
					float64(f.Deps.LayerBytes)/(1<<20), info.Files, info.BuildMS, info.Steps)
			}
		}
	}
	for rep := range reps {
		for _, v := range variants {
			for _, s := range sets {
				fns := []string{s.name}
				if v.name == "erofs-lz4" {
					fns = append(fns, s.name+"-nopyc")
				}
				for _, fn := range fns {
					ms := bootImport(t, v.e.c, fn)
					key := v.name + "/" + fn
					imports[key] = append(imports[key], ms)
					t.Logf("rep %d %s: first import %.0f ms", rep+1, key, ms)
				}
			}
		}
	}
	keys := make([]string, 0, len(imports))
	for k := range imports {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("first import %-36s median %6.0f ms of %v", k, median(imports[k]), imports[k])
	}
	measureColdSetup(t, variants[2].e.c, cold)
}

// importProbe is a function that imports mods at load and reports how long
// that took; nopyc makes Python ignore the layer's bytecode (its cache
// prefix points elsewhere), as if the layer had none.
func importProbe(t *testing.T, mods, requirements string, nopyc bool) string {
	dir := filepath.Join(t.TempDir(), "probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	prefix := ""
	if nopyc {
		prefix = "sys.pycache_prefix = '/tmp/no-layer-bytecode'\n"
	}
	src := "import sys, time\n" + prefix + "t0 = time.perf_counter()\nimport " + mods +
		"\nIMPORT_MS = (time.perf_counter() - t0) * 1000\n\ndef handle(event):\n    return IMPORT_MS\n"
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if requirements != "" {
		if err := os.WriteFile(filepath.Join(dir, "requirements.txt"), []byte(requirements), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// bootImport boots fn, reads its import time and deletes the VM.
func bootImport(t *testing.T, c *client.Client, fn string) float64 {
	ctx := ctxT(t)
	vm, err := c.BootVM(ctx, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.DeleteVM(ctx, vm.ID) }()
	inv, err := c.InvokeVM(ctx, vm.ID, nil, client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("invoke %s: %v %+v", fn, err, inv)
	}
	var ms float64
	if err := json.Unmarshal(inv.Result, &ms); err != nil {
		t.Fatal(err)
	}
	return ms
}

type layerJSON struct {
	Files   int                `json:"files"`
	BuildMS float64            `json:"build_ms"`
	Steps   map[string]float64 `json:"steps"`
}

func layerInfo(t *testing.T, dataDir, digest string) layerJSON {
	var l layerJSON
	b, err := os.ReadFile(filepath.Join(dataDir, "deps", "layers", digest, "layer.json"))
	if err == nil {
		err = json.Unmarshal(b, &l)
	}
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// measureColdSetup: restore set-up of a function with a layer and of the
// same function without one, n cold starts each, alternating.
func measureColdSetup(t *testing.T, c *client.Client, n int) {
	ctx := ctxT(t)
	snaps := map[string]string{}
	for _, fn := range []struct{ name, requirements string }{{"plain", ""}, {"layered", "texttable==1.7.2\n"}} {
		mods := "json"
		if fn.requirements != "" {
			mods = "texttable"
		}
		if _, err := c.CreateFunctionFromDir(ctx, fn.name, importProbe(t, mods, fn.requirements, false), 256, 1,
			client.WithVMMPool(-1, 0), client.WithKeepAlive(-1)); err != nil {
			t.Fatal(err)
		}
		vm, err := c.BootVM(ctx, fn.name)
		if err != nil {
			t.Fatal(err)
		}
		sn, err := c.CreateSnapshot(ctx, vm.ID)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.DeleteVM(ctx, vm.ID)
		snaps[fn.name] = sn.ID
	}
	setup := map[string][]float64{}
	for range n {
		for _, fn := range []string{"plain", "layered"} {
			inv, err := c.InvokeFunction(ctx, fn, nil, client.InvokeOptions{Snapshot: snaps[fn], Strategy: "vanilla"})
			if err != nil || !inv.OK || inv.Timing.Restore == nil {
				t.Fatalf("cold %s: %v %+v", fn, err, inv)
			}
			setup[fn] = append(setup[fn], inv.Timing.Restore.SetupMS)
		}
	}
	p, l := median(setup["plain"]), median(setup["layered"])
	t.Logf("cold restore set-up, median of %d each: without a layer %.1f ms, with one %.1f ms (difference %+.1f ms)", n, p, l, l-p)
	t.Logf("set-up samples without: %v", setup["plain"])
	t.Logf("set-up samples with:    %v", setup["layered"])
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}
