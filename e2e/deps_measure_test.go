package e2e

import (
	"encoding/json"
	"fmt"

	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

// TestMeasureDependencyLayers is a measurement, not a test: it only runs
// with THAW_DEPS_MEASURE=1 and reports (docs/bench/deps.md, "Dependency
// layers"); it fails only if something does not work. For two real sets
// (igraph + Chameleon; requests and its four dependencies) and each layer
// variant (ext4, erofs uncompressed, lz4, lz4hc) it reports the image size
// and build time, and per boot of a real guest (THAW_DEPS_MEASURE_REPS,
// default 3, the variants interleaved so load from elsewhere spreads over
// all of them): the first import ("import"), the import without the
// precompiled bytecode (on the default layers), and the time to read every file of the
// igraph + Chameleon layer ("read": the file system's own cost); then
// ("cold") the restore set-up of a function with a layer against one
// without (THAW_DEPS_MEASURE_COLD cold starts each, default 40,
// alternating, on the default layers). THAW_DEPS_MEASURE_PARTS picks parts
// (default import,read,cold), THAW_DEPS_MEASURE_VARIANTS variants (default
// all).
func TestMeasureDependencyLayers(t *testing.T) {
	if os.Getenv("THAW_DEPS_MEASURE") != "1" {
		t.Skip("a measurement: set THAW_DEPS_MEASURE=1 (and THAW_IMAGE)")
	}
	reps, cold := envNumber("THAW_DEPS_MEASURE_REPS", 3), envNumber("THAW_DEPS_MEASURE_COLD", 40)
	parts := os.Getenv("THAW_DEPS_MEASURE_PARTS")
	if parts == "" {
		parts = "import,read,cold"
	}
	part := func(p string) bool { return strings.Contains(","+parts+",", ","+p+",") }
	ix := pypitest.Serve(t, "Chameleon-4.6.0", "igraph-1.0.0", "texttable-1.7.2", "requests-2.32.3", "urllib3-2.8.0",
		"idna-3.20", "certifi-2026.10.19", "charset_normalizer-3.5.3")
	ctx := ctxT(t)
	type probe struct{ name, requirements, imports, kind string }
	var probes []probe
	for _, s := range []struct{ name, requirements, imports string }{
		{"igraph-chameleon", "chameleon==4.6.0\nigraph==1.0.0\n", "igraph, chameleon"},
		{"requests", "requests==2.32.3\n", "requests"},
	} {
		if part("import") {
			probes = append(probes, probe{s.name, s.requirements, s.imports, "import"}, probe{s.name + "-nopyc", s.requirements, s.imports, "nopyc"})
		}
		if part("read") && s.name == "igraph-chameleon" {
			probes = append(probes, probe{s.name + "-read", s.requirements, "", "read"})
		}
	}
	type variant struct {
		name, format, compression string
		e                         *env
	}
	variants := []*variant{{name: "ext4", format: "ext4"}, {name: "erofs", format: "erofs"},
		{name: "erofs-lz4", format: "erofs", compression: "lz4"}, {name: "erofs-lz4hc", format: "erofs", compression: "lz4hc"}}
	if only := os.Getenv("THAW_DEPS_MEASURE_VARIANTS"); only != "" {
		variants = slices.DeleteFunc(variants, func(v *variant) bool { return !slices.Contains(strings.Split(only, ","), v.name) })
	}
	runs := func(v *variant, p probe) bool { return p.kind != "nopyc" || v.name == "erofs" }
	for _, v := range variants {
		dataDir := t.TempDir()
		v.e = startEnvWith(t, dataDir, func(c *daemon.Config) {
			c.Deps = daemon.DepsConfig{IndexURL: ix.URL, Format: v.format, Compression: v.compression}
		})
		for _, p := range probes {
			if !runs(v, p) {
				continue
			}
			f, err := v.e.c.CreateFunctionFromDir(ctx, p.name, layerProbe(t, p.kind, p.imports, p.requirements), 512, 1)
			if err != nil {
				t.Fatal(err)
			}
			info := layerInfo(t, dataDir, f.Deps.Layer)
			t.Logf("%s %s: image %d bytes (%.1f MiB), %d files, build %.0f ms %v", v.name, p.name, f.Deps.LayerBytes,
				float64(f.Deps.LayerBytes)/(1<<20), info.Files, info.BuildMS, info.Steps)
		}
	}
	ms := map[string][]float64{} // variant/probe -> ms per boot
	for rep := range reps {
		for _, v := range variants {
			for _, p := range probes {
				if runs(v, p) {
					key := v.name + "/" + p.name
					ms[key] = append(ms[key], bootProbe(t, v.e.c, p.name))
					t.Logf("rep %d %s: %.0f ms", rep+1, key, ms[key][len(ms[key])-1])
				}
			}
		}
	}
	keys := make([]string, 0, len(ms))
	for k := range ms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%-40s median %6.0f ms, min %6.0f ms of %.0f", k, median(ms[k]), slices.Min(ms[k]), ms[k])
	}
	if part("cold") {
		i := slices.IndexFunc(variants, func(v *variant) bool { return v.name == "erofs" })
		measureColdSetup(t, variants[max(i, 0)].e.c, cold)
	}
}

// layerProbe is a function whose handler reports a time taken at load:
// "import" imports mods; "nopyc" the same with Python ignoring the layer's
// bytecode (its cache prefix points elsewhere), as if the layer had none;
// "read" reads every file of the layer's site directory.
func layerProbe(t *testing.T, kind, mods, requirements string) string {
	dir := filepath.Join(t.TempDir(), "probe")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var body string
	switch kind {
	case "read":
		body = "import os\nt0 = time.perf_counter()\nfor root, _, files in os.walk('/deps/site'):\n" +
			"    for f in files:\n        with open(os.path.join(root, f), 'rb') as fh:\n            fh.read()\n"
	case "nopyc":
		body = "sys.pycache_prefix = '/tmp/no-layer-bytecode'\nt0 = time.perf_counter()\nimport " + mods + "\n"
	default:
		body = "t0 = time.perf_counter()\nimport " + mods + "\n"
	}
	src := "import sys, time\n" + body + "LOAD_MS = (time.perf_counter() - t0) * 1000\n\ndef handle(event):\n    return LOAD_MS\n"
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

// bootProbe boots fn, reads its time and deletes the VM.
func bootProbe(t *testing.T, c *client.Client, fn string) float64 {
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
		if _, err := c.CreateFunctionFromDir(ctx, fn.name, layerProbe(t, "import", mods, fn.requirements), 256, 1,
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
	type sample struct{ setup, vmm, state float64 }
	got := map[string][]sample{}
	for range n {
		for _, fn := range []string{"plain", "layered"} {
			inv, err := c.InvokeFunction(ctx, fn, nil, client.InvokeOptions{Snapshot: snaps[fn], Strategy: "vanilla"})
			if err != nil || !inv.OK || inv.Timing.Restore == nil {
				t.Fatalf("cold %s: %v %+v", fn, err, inv)
			}
			r := inv.Timing.Restore
			got[fn] = append(got[fn], sample{r.SetupMS, r.VMMStartMS, r.LoadStateMS})
		}
	}
	col := func(fn string, f func(sample) float64) []float64 {
		var out []float64
		for _, s := range got[fn] {
			out = append(out, f(s))
		}
		return out
	}
	var diffs []float64
	for i := range got["plain"] {
		diffs = append(diffs, got["layered"][i].setup-got["plain"][i].setup)
	}
	for _, m := range []struct {
		what string
		f    func(sample) float64
	}{{"set-up", func(s sample) float64 { return s.setup }}, {"vmm start", func(s sample) float64 { return s.vmm }},
		{"device state load", func(s sample) float64 { return s.state }}} {
		p, l := col("plain", m.f), col("layered", m.f)
		t.Logf("cold restore %-17s (n=%d each): without a layer median %.1f ms (min %.1f), with one %.1f ms (min %.1f)",
			m.what, n, median(p), slices.Min(p), median(l), slices.Min(l))
	}
	t.Logf("cold restore set-up, paired difference (with - without, alternating): median %+.1f ms", median(diffs))
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

// envNumber is the positive number the environment variable name holds,
// or def when it is unset or holds no such number.
func envNumber[T int | float64](name string, def T) T {
	var v T
	if _, err := fmt.Sscan(os.Getenv(name), &v); err == nil && v > 0 {
		return v
	}
	return def
}
