package deps

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

// cachedLock adds wheel files to m's cache and returns their lock.
func cachedLock(t testing.TB, m *Manager, files ...string) *Lock {
	t.Helper()
	l := &Lock{}
	for _, f := range files {
		tmp := filepath.Join(t.TempDir(), filepath.Base(f))
		if err := copyTestFile(f, tmp); err != nil {
			t.Fatal(err)
		}
		sum, _, err := m.Wheels.Add(tmp)
		if err != nil {
			t.Fatal(err)
		}
		wn, err := ParseWheelName(filepath.Base(f))
		if err != nil {
			t.Fatal(err)
		}
		l.Pins = append(l.Pins, Pin{Name: wn.Name, Version: wn.Version, SHA256: sum, File: wn.File})
	}
	l.sort()
	return l
}

func copyTestFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

func needTool(t *testing.T, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		if os.Getenv("THAW_IMAGE") != "" {
			t.Fatalf("%s is missing (scripts/install-deps.sh installs it): %v", tool, err)
		}
		t.Skipf("%s is not installed (make test installs it)", tool)
	}
}

// A layer of real wheels: the tree is installed, precompiled for the
// guest (unchecked-hash pycs naming /deps paths) and packed; a second
// build of the same lock reuses it; a build elsewhere gives the same image
// byte for byte.
func TestBuildLayer(t *testing.T) {
	needTool(t, "mkfs.erofs")
	m := testManager(t, NoIndex)
	lock := cachedLock(t, m, pypitest.Cached(t, "texttable-1.7.2"), pypitest.Cached(t, "igraph-1.0.0"))
	l, built, err := m.Layers.Build(context.Background(), lock)
	if err != nil || !built {
		t.Fatalf("build: %v (built %v)", err, built)
	}
	t.Logf("layer %s: %d bytes, %d files, built in %.0f ms %v", l.Digest[:12], l.Bytes, l.Files, l.BuildMS, l.Steps)
	if l.Digest != lock.Digest(FormatErofs) || l.Format != FormatErofs || len(l.Lines) != 2 || l.Bytes <= 0 {
		t.Fatalf("layer %+v", l)
	}
	if sum, err := hashFile(l.Path); err != nil || sum != l.SHA256 {
		t.Fatalf("image sha256 %s, recorded %s (%v)", sum, l.SHA256, err)
	}
	out := filepath.Join(t.TempDir(), "x")
	if b, err := exec.Command("fsck.erofs", "--extract="+out, l.Path).CombinedOutput(); err != nil {
		t.Fatalf("fsck.erofs: %v: %s", err, b)
	}
	for _, p := range []string{"site/igraph/__init__.py", "site/texttable.py", "site/igraph-1.0.0.dist-info/RECORD", "thaw-layer.json"} {
		if _, err := os.Stat(filepath.Join(out, p)); err != nil {
			t.Errorf("layer lacks %s", p)
		}
	}
	pyc, err := filepath.Glob(filepath.Join(out, "site/igraph/__pycache__/__init__.cpython-311.pyc"))
	if err != nil || len(pyc) != 1 {
		t.Fatalf("no bytecode for igraph: %v", err)
	}
	b, err := os.ReadFile(pyc[0])
	if err != nil {
		t.Fatal(err)
	}
	// PEP 552: flags 0b01 (hash-based, unchecked), then the source's path
	// in the guest inside the code object.
	if b[4] != 1 || !strings.Contains(string(b), "/deps/site/igraph/__init__.py") {
		t.Errorf("pyc flags %d, or it does not name its /deps path", b[4])
	}

	again, built, err := m.Layers.Build(context.Background(), lock)
	if err != nil || built || again.SHA256 != l.SHA256 {
		t.Fatalf("second build: built %v, %v", built, err)
	}
	other := testManager(t, NoIndex)
	elsewhere, _, err := other.Layers.Build(context.Background(), cachedLock(t, other, pypitest.Cached(t, "igraph-1.0.0"), pypitest.Cached(t, "texttable-1.7.2")))
	if err != nil {
		t.Fatal(err)
	}
	if elsewhere.SHA256 != l.SHA256 || elsewhere.Digest != l.Digest {
		t.Errorf("another build of the same lock: sha256 %s, want %s (reproducible)", elsewhere.SHA256, l.SHA256)
	}
}

// A lock with a hostile wheel builds nothing: no layer, no temporaries.
func TestBuildLayerRefusesAndLeavesNothing(t *testing.T) {
	needTool(t, "mkfs.erofs")
	m := testManager(t, NoIndex)
	dir := t.TempDir()
	good := pypitest.Wheel{Name: "good", Version: "1.0"}.Write(t, dir)
	bad := pypitest.Wheel{Name: "bad", Version: "1.0", Files: map[string]string{"../escape.py": "x"}}.Write(t, dir)
	lock := cachedLock(t, m, good, bad)
	_, _, err := m.Layers.Build(context.Background(), lock)
	if !errors.Is(err, ErrBadWheel) || !strings.Contains(err.Error(), "bad-1.0-py3-none-any.whl") {
		t.Fatalf("build = %v", err)
	}
	ents, _ := os.ReadDir(m.Layers.Dir())
	if len(ents) != 0 {
		t.Fatalf("left in the layer store: %v", ents)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(m.Layers.Dir()), "escape.py")); err == nil {
		t.Fatal("the entry escaped")
	}
	missing := &Lock{Pins: []Pin{{Name: "ghost", Version: "1", SHA256: sumA}}}
	if _, _, err := m.Layers.Build(context.Background(), missing); !errors.Is(err, ErrLayerMissing) {
		t.Fatalf("a lock whose wheel is not cached: %v", err)
	}
}

// Adopt takes a layer built elsewhere only if it is what it claims.
func TestAdoptLayer(t *testing.T) {
	needTool(t, "mkfs.erofs")
	src := testManager(t, NoIndex)
	l, _, err := src.Layers.Build(context.Background(), cachedLock(t, src, pypitest.Cached(t, "texttable-1.7.2")))
	if err != nil {
		t.Fatal(err)
	}
	dst := testManager(t, NoIndex)
	brought := func() string {
		p := filepath.Join(dst.Layers.Dir(), ".tmp-test-"+time.Now().Format("150405.000000000"))
		if err := copyTestFile(l.Path, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := *l
	bad.SHA256 = sumA
	if _, err := dst.Layers.Adopt(brought(), bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "want aaaaaaaaaaaa") {
		t.Fatalf("adopt with the wrong sha256: %v", err)
	}
	bad = *l
	bad.Lines = []string{"texttable==1.7.1 --hash=sha256:" + sumB}
	if _, err := dst.Layers.Adopt(brought(), bad); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "its lines digest to") {
		t.Fatalf("adopt with other lines: %v", err)
	}
	got, err := dst.Layers.Adopt(brought(), *l)
	if err != nil || got.SHA256 != l.SHA256 {
		t.Fatalf("adopt: %+v %v", got, err)
	}
	if _, err := dst.Layers.Adopt(brought(), *l); err != nil {
		t.Fatalf("adopt of a layer that is here: %v", err)
	}
}

// Collection: layers in use stay whatever the budget; the rest (wheels
// and unused layers) go least recently used first until within it; a
// collection does nothing while a create adds to the cache.
func TestCollect(t *testing.T) {
	needTool(t, "mkfs.erofs")
	m := testManager(t, NoIndex)
	dir := t.TempDir()
	var layers []*Layer
	for _, n := range []string{"one", "two", "three"} {
		w := pypitest.Wheel{Name: n, Version: "1.0", Files: map[string]string{n + "/data.py": strings.Repeat("#"+n, 20000)}}.Write(t, dir)
		l, _, err := m.Layers.Build(context.Background(), cachedLock(t, m, w))
		if err != nil {
			t.Fatal(err)
		}
		layers = append(layers, l)
		time.Sleep(20 * time.Millisecond) // distinct times of last use
	}
	inUse := func() (map[string]bool, error) { return map[string]bool{layers[0].Digest: true}, nil }
	end := m.Begin()
	if _, err := m.Collect(inUse); !errors.Is(err, ErrBusy) {
		t.Fatalf("collect during a create: %v", err)
	}
	end()
	m.budget = layers[2].Bytes + 1<<10 // room for about one unused layer
	st, err := m.Collect(inUse)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Layers.Get(layers[0].Digest); err != nil {
		t.Errorf("a layer in use was removed: %v", err)
	}
	if _, err := m.Layers.Get(layers[1].Digest); !errors.Is(err, ErrLayerMissing) {
		t.Errorf("the least recently used unused layer stayed: %v", err)
	}
	if st.Layers != 2 && st.Layers != 1 || st.Wheels != 3 || st.InUseLayers != 1 {
		t.Errorf("stats %+v", st)
	}
	m.budget = 0
	if st, err = m.Collect(inUse); err != nil || st.UnusedLayers != 0 {
		t.Fatalf("budget 0: %+v %v", st, err)
	}
	if _, err := m.Layers.Get(layers[2].Digest); !errors.Is(err, ErrLayerMissing) {
		t.Errorf("budget 0 kept an unused layer")
	}
	if _, err := m.Layers.Get(layers[0].Digest); err != nil {
		t.Errorf("budget 0 removed the layer in use: %v", err)
	}
}

// BenchmarkLayerGet is what a boot or a restore of a function with a
// layer adds on the daemon's side: finding the layer and its description
// (the image's hash is checked once per process, then by stamp).
func BenchmarkLayerGet(b *testing.B) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		b.Skip("mkfs.erofs is not installed")
	}
	m, err := Open(Options{Dir: filepath.Join(b.TempDir(), "deps"), Python: "python3", IndexURL: NoIndex, Budget: -1})
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	w := pypitest.Wheel{Name: "bench", Version: "1.0"}.Write(b, dir)
	sum, _, err := m.Wheels.Add(w)
	if err != nil {
		b.Fatal(err)
	}
	l, _, err := m.Layers.Build(context.Background(), &Lock{Pins: []Pin{{Name: "bench", Version: "1.0", SHA256: sum}}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := m.Layers.Get(l.Digest); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBuildLayer builds the layer of two cached wheels, igraph (a C
// extension) and texttable, into a fresh store each time: installing,
// precompiling, packing and publishing (docs/bench/deps.md). Its steps are
// reported as metrics.
func BenchmarkBuildLayer(b *testing.B) {
	if _, err := exec.LookPath("mkfs.erofs"); err != nil {
		b.Skip("mkfs.erofs is not installed")
	}
	wheels := []string{pypitest.Cached(b, "igraph-1.0.0"), pypitest.Cached(b, "texttable-1.7.2")}
	steps := map[string]float64{}
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		m, err := Open(Options{Dir: filepath.Join(b.TempDir(), fmt.Sprint("deps", i)), Python: "python3", IndexURL: NoIndex, Budget: -1})
		if err != nil {
			b.Fatal(err)
		}
		lock := cachedLock(b, m, wheels...)
		b.StartTimer()
		l, built, err := m.Layers.Build(context.Background(), lock)
		if err != nil || !built {
			b.Fatalf("build: %v", err)
		}
		for k, v := range l.Steps {
			steps[k] += v
		}
	}
	for k, v := range steps {
		b.ReportMetric(v/float64(b.N), k+"-ms/op")
	}
}
