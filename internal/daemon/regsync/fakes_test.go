package regsync

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
)

// node is one Sync on fakes of its Deps: a catalog in memory, snapshots in
// a directory of the test's, and a record of what it asked of the daemon.
type node struct {
	*Sync
	dir string // data directory
	db  *fakeCatalog
	rec *calls
	// createDigest, if set, is the digest a function created from the
	// registry gets (other code than the snapshot's).
	createDigest string
	// running, if set, is a live VM of every function.
	running *catalog.VM
}

// calls records what the component asked of the daemon.
type calls struct {
	mu       sync.Mutex
	created  []string // functions created from the registry
	forgot   []string
	deleted  []string // snapshots deleted
	released []string // functions whose idle and standby VMs were stopped
	entered  []string // snapshots entered
	gc       []string // registry collection outcomes counted
	code     map[string][]byte
}

func (c *calls) add(list *[]string, v string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	*list = append(*list, v)
}

func (c *calls) get(list *[]string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*list)
}

// newNode opens a Sync on registry dir reg (none if ""), trusting keys.
func newNode(t *testing.T, reg string, trusted ...string) *node {
	t.Helper()
	n := &node{dir: t.TempDir(), db: newFakeCatalog(), rec: &calls{code: map[string][]byte{}}}
	if err := os.Mkdir(filepath.Join(n.dir, "snapshots"), 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: n.dir, SnapshotsDir: filepath.Join(n.dir, "snapshots"), TrustedKeys: trusted}
	if reg != "" {
		cfg.Registry = &registry.Config{Type: registry.TypeFS, Path: reg, ChunkSize: registry.MinChunkSize}
	}
	snaps, fns, vms := fakeSnapshots{n}, fakeFunctions{n}, fakeVMs{n}
	s, err := New(cfg, Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Catalog: n.db, Metrics: fakeMetrics{n.rec},
		Snapshots: func() Snapshots { return snaps }, Functions: func() Functions { return fns },
		CheckSnapshotID: snaps.checkID, CheckName: fns.checkName, Verified: snaps.verified, NewestSnapshot: snaps.newest,
		SnapshotBody: snaps.body, Forget: fns.forget, BuildInputs: func(*catalog.Function) any { return nil },
		HoldLayers: func() func() { return func() {} }, ReleaseOutdated: vms.releaseOutdated, Running: vms.running})
	if err != nil {
		t.Fatal(err)
	}
	n.Sync = s
	return n
}

// registryDir is an empty directory registry.
func registryDir(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "registry")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// digestOf is a function digest for the tests.
func digestOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// addSnapshot writes a real snapshot directory of function fn (sealed by
// the snapshot package: 4 MiB of memory, random where seeded) into n's
// snapshots, with the function's code, and enters both in n's catalog.
func (n *node) addSnapshot(t *testing.T, id string, fn *catalog.Function, created time.Time) *catalog.Snapshot {
	t.Helper()
	if fn.CodeDir == "" {
		fn.CodeDir = filepath.Join(n.dir, "functions", fn.Name+"-"+fn.Digest[:8])
		code := filepath.Join(fn.CodeDir, fn.Name)
		if err := os.MkdirAll(code, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(code, "handler.py"), []byte("def handler(event):\n    return "+fmt.Sprintf("%q", fn.Digest)+"\n"))
	}
	root := filepath.Join(n.dir, "snapshots")
	tmp := filepath.Join(root, ".tmp-"+id)
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 4<<20)
	r := rand.New(rand.NewPCG(uint64(len(id)), 7))
	for i := range 1 << 20 { // the first MiB is data, the rest zeros
		mem[i] = byte(r.UintN(255) + 1)
	}
	writeFile(t, filepath.Join(tmp, snapshot.MemoryFile), mem)
	writeFile(t, filepath.Join(tmp, snapshot.StateFile), mem[:100<<10+3])
	memInfo, err := snapshot.HashFile(filepath.Join(tmp, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	m := &snapshot.Manifest{ID: id, Function: fn.Name, CreatedAt: created.UTC(),
		Guest:  snapshot.Guest{MemoryMiB: 4, VCPUs: 1, Machine: "pc", Cmdline: "console=ttyS0"},
		VMM:    snapshot.VMM{Name: "qemu", Version: "7.2", Accel: "tcg"},
		Inputs: snapshot.Inputs{Function: snapshot.Digest{SHA256: fn.Digest}},
		Files:  map[string]snapshot.FileInfo{snapshot.MemoryFile: memInfo}}
	final := filepath.Join(root, id)
	if err := snapshot.Commit(tmp, final, m); err != nil {
		t.Fatal(err)
	}
	sn := &catalog.Snapshot{ID: id, Function: fn.Name, Dir: final, MemoryMiB: 4, CreatedAt: created}
	n.db.putFunction(fn)
	if err := n.db.PutSnapshot(context.Background(), sn); err != nil {
		t.Fatal(err)
	}
	return sn
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// fakeCatalog is the catalog in memory.
type fakeCatalog struct {
	mu    sync.Mutex
	fns   map[string]*catalog.Function
	snaps map[string]*catalog.Snapshot
}

func newFakeCatalog() *fakeCatalog {
	return &fakeCatalog{fns: map[string]*catalog.Function{}, snaps: map[string]*catalog.Snapshot{}}
}

func (c *fakeCatalog) putFunction(fn *catalog.Function) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns[fn.Name] = fn
}

// copyOf is a copy of row key of m, one of c's tables of kind.
func copyOf[T any](c *fakeCatalog, m map[string]*T, kind, key string) (*T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if row, ok := m[key]; ok {
		cp := *row
		return &cp, nil
	}
	return nil, fmt.Errorf("%s %s: %w", kind, key, catalog.ErrNotFound)
}

// drop removes row key of m, one of c's tables.
func drop[T any](c *fakeCatalog, m map[string]*T, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(m, key)
}

func (c *fakeCatalog) GetFunction(_ context.Context, name string) (*catalog.Function, error) {
	return copyOf(c, c.fns, "function", name)
}

func (c *fakeCatalog) ListFunctions(context.Context) ([]*catalog.Function, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*catalog.Function
	for _, name := range slices.Sorted(maps.Keys(c.fns)) {
		cp := *c.fns[name]
		out = append(out, &cp)
	}
	return out, nil
}

func (c *fakeCatalog) GetSnapshot(_ context.Context, id string) (*catalog.Snapshot, error) {
	return copyOf(c, c.snaps, "snapshot", id)
}

func (c *fakeCatalog) ListSnapshots(_ context.Context, function string) ([]*catalog.Snapshot, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*catalog.Snapshot
	for _, id := range slices.Sorted(maps.Keys(c.snaps)) {
		if sn := c.snaps[id]; sn.Function == function {
			cp := *sn
			out = append(out, &cp)
		}
	}
	return out, nil
}

func (c *fakeCatalog) PutSnapshot(_ context.Context, s *catalog.Snapshot) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	cp := *s
	c.snaps[s.ID] = &cp
	return nil
}

func (c *fakeCatalog) GetVersion(_ context.Context, function string, number int) (*catalog.Version, error) {
	return nil, fmt.Errorf("version %s:%d: %w", function, number, catalog.ErrNotFound)
}

func (c *fakeCatalog) ImportVersion(context.Context, *catalog.Version, []string, string) error {
	return fmt.Errorf("the tests push no versions")
}

// fakeSnapshots keeps snapshots in the node's directory and catalog.
type fakeSnapshots struct{ n *node }

func (x fakeSnapshots) checkID(id string) error {
	if len(id) != len("snap-")+12 {
		return fmt.Errorf("snapshot id %q is malformed", id)
	}
	return nil
}

func (x fakeSnapshots) Get(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return x.n.db.GetSnapshot(ctx, id)
}

func (x fakeSnapshots) verified(ctx context.Context, id string) (*catalog.Snapshot, *catalog.Function, error) {
	sn, err := x.n.db.GetSnapshot(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if _, _, err := snapshot.Check(sn.Dir, nil); err != nil {
		return nil, nil, err
	}
	fn, err := x.n.db.GetFunction(ctx, sn.Function)
	return sn, fn, err
}

func (x fakeSnapshots) Compatible(*snapshot.Manifest, *catalog.Function) error { return nil }
func (x fakeSnapshots) Enter(ctx context.Context, rec *catalog.Snapshot, _ json.RawMessage) error {
	x.n.rec.add(&x.n.rec.entered, rec.ID)
	return x.n.db.PutSnapshot(ctx, rec)
}

func (x fakeSnapshots) Delete(_ context.Context, id string) error {
	drop(x.n.db, x.n.db.snaps, id)
	x.n.rec.add(&x.n.rec.deleted, id)
	return nil
}

func (x fakeSnapshots) Collect(context.Context, string, ...string) {}
func (x fakeSnapshots) newest(ctx context.Context, function string, _ int) (string, error) {
	snaps, _ := x.n.db.ListSnapshots(ctx, function)
	if len(snaps) == 0 {
		return "", fmt.Errorf("no snapshot of %s: %w", function, catalog.ErrNotFound)
	}
	return snaps[len(snaps)-1].ID, nil
}

func (x fakeSnapshots) Lock(string) *sync.Mutex { return &sync.Mutex{} }
func (x fakeSnapshots) body(sn *catalog.Snapshot) *wire.Snapshot {
	return &wire.Snapshot{ID: sn.ID, Function: sn.Function, Dir: sn.Dir}
}

// fakeFunctions creates functions in the node's catalog; the tests'
// functions have no dependency layer.
type fakeFunctions struct{ n *node }

func (x fakeFunctions) checkName(name string) error {
	if name == "" {
		return fmt.Errorf("empty function name")
	}
	return nil
}

func (x fakeFunctions) CreateFromRecord(_ context.Context, name string, rec *registry.FunctionRecord, code []byte) (*catalog.Function, error) {
	x.n.rec.add(&x.n.rec.created, name)
	x.n.rec.mu.Lock()
	x.n.rec.code[name] = code
	x.n.rec.mu.Unlock()
	fn := &catalog.Function{Name: name, Digest: rec.Digest, MemoryMiB: rec.MemoryMiB, CreatedAt: time.Now()}
	if x.n.createDigest != "" {
		fn.Digest = x.n.createDigest
	}
	x.n.db.putFunction(fn)
	return fn, nil
}

func (x fakeFunctions) BuildFromRecord(context.Context, string, *registry.FunctionRecord, []byte) (*catalog.Function, error) {
	return nil, fmt.Errorf("the tests build no versions")
}

func (x fakeFunctions) forget(_ context.Context, name string) error {
	drop(x.n.db, x.n.db.fns, name)
	x.n.rec.add(&x.n.rec.forgot, name)
	return nil
}

func (x fakeFunctions) ScanForSecrets(context.Context, string, string) error { return nil }
func (fakeFunctions) PushedLayer(*catalog.Function) (*registry.Layer, string, error) {
	return nil, "", nil
}
func (fakeFunctions) PullLayer(context.Context, *registry.RemoteManifest) error { return nil }

// fakeVMs records the VMs stopped and reports n.running.
type fakeVMs struct{ n *node }

func (x fakeVMs) releaseOutdated(function string) { x.n.rec.add(&x.n.rec.released, function) }
func (x fakeVMs) running(context.Context, string) (*catalog.VM, error) {
	return x.n.running, nil
}

// fakeMetrics records the collections counted.
type fakeMetrics struct{ rec *calls }

func (m fakeMetrics) RegistryGC(outcome string, _ int64) { m.rec.add(&m.rec.gc, outcome) }
func (m fakeMetrics) RegistryRefused(string, string)     {}
