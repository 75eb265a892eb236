package registry_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/objstore"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

const (
	mib = 1 << 20
	cs  = 64 << 10 // chunk size of the tests
)

// fixture is a snapshot directory written by the test with a known layout.
type fixture struct {
	dir    string
	id     string
	memory []byte
}

// region of a synthetic memory file.
type region struct {
	off, n int64
	seed   uint64 // 0: zeros actually written (allocated but zero)
}

// makeSnapshot writes a real snapshot directory (manifest sealed by the
// snapshot package): a random vmstate, a 4 MiB sparse memory file with the
// given regions, and a strategy data file and its JSON.
func makeSnapshot(t testing.TB, root, id string, regions []region) *fixture {
	t.Helper()
	tmp := filepath.Join(root, ".tmp-"+id)
	if err := os.MkdirAll(filepath.Join(tmp, "strategies", "reap"), 0o700); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, 4*mib)
	f, err := os.Create(filepath.Join(tmp, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range regions {
		b := mem[r.off : r.off+r.n]
		if r.seed != 0 {
			fill(b, r.seed)
		}
		if _, err := f.WriteAt(b, r.off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(len(mem))); err != nil {
		t.Fatal(err)
	}
	f.Close()
	state := make([]byte, 300<<10+17)
	fill(state, uint64(len(id)))
	writeFile(t, filepath.Join(tmp, snapshot.StateFile), state)
	ws := make([]byte, 200<<10)
	fill(ws, 99)
	writeFile(t, filepath.Join(tmp, "strategies", "reap", "ws.bin"), ws)
	writeFile(t, filepath.Join(tmp, "strategies", "reap", "reap.json"), []byte(`{"page_size":4096,"pages":[[40,2]]}`))
	memInfo, err := snapshot.HashFile(filepath.Join(tmp, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	m := &snapshot.Manifest{ID: id, Function: "hello", CreatedAt: time.Now().UTC(),
		Guest: snapshot.Guest{MemoryMiB: 4, VCPUs: 1, Machine: "pc", Cmdline: "console=ttyS0"},
		VMM:   snapshot.VMM{Name: "qemu", Version: "7.2", Accel: "tcg"},
		Files: map[string]snapshot.FileInfo{snapshot.MemoryFile: memInfo}}
	final := filepath.Join(root, id)
	if err := snapshot.Commit(tmp, final, m); err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: final, id: id, memory: mem}
}

func fill(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed*7+1))
	for i := range b {
		b[i] = byte(r.UintN(255) + 1)
	}
}

func writeFile(t testing.TB, p string, b []byte) {
	t.Helper()
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// baseRegions: data in chunks 0-2, zeros written in chunk 5, data in
// chunk 20 and the last chunk; every other chunk a hole.
func baseRegions() []region {
	return []region{{0, 3 * cs, 1}, {5 * cs, cs, 0}, {20 * cs, cs / 2, 2}, {4*mib - cs, cs, 3}}
}

// sameTree fails unless every file of want is in got with equal bytes.
func sameTree(t *testing.T, want, got string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(want, "*"))
	more, _ := filepath.Glob(filepath.Join(want, "strategies", "*", "*"))
	for _, p := range append(files, more...) {
		if st, _ := os.Stat(p); st.IsDir() {
			continue
		}
		rel, _ := filepath.Rel(want, p)
		a, _ := os.ReadFile(p)
		b, err := os.ReadFile(filepath.Join(got, rel))
		if err != nil || !bytes.Equal(a, b) {
			t.Fatalf("%s differs after the round trip (%v)", rel, err)
		}
	}
}

// env is one MinIO, a store on it (signing with key, trusting it) and a
// chunk cache.
type env struct {
	srv   *miniotest.Server // nil on a directory store
	store *registry.Store
	cache *registry.Cache
	root  string
	key   *signing.Key
}

// trusting is a store trust that signs with key and accepts keys (and
// key's own).
func trusting(key *signing.Key, keys ...signing.PublicKey) registry.Trust {
	return registry.Trust{Signer: key, Keys: signing.NewKeyring(append(keys, key.Public())...)}
}

func newKey(t testing.TB) *signing.Key {
	t.Helper()
	k, err := signing.GenerateKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func newEnv(t testing.TB, budget int64) *env {
	t.Helper()
	srv := miniotest.Start(t)
	_, st := openMinIO(t, srv)
	e := withStore(t, st, budget)
	e.srv = srv
	return e
}

// newEnvFS is newEnv on a directory store.
func newEnvFS(t testing.TB, budget int64) *env {
	t.Helper()
	st, err := registry.Open(registry.Config{Type: registry.TypeFS, Path: filepath.Join(t.TempDir(), "registry"), ChunkSize: cs})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	return withStore(t, st, budget)
}

// withStore signs with a new key on st, trusting it, and opens a cache.
func withStore(t testing.TB, st *registry.Store, budget int64) *env {
	t.Helper()
	key := newKey(t)
	st = st.WithTrust(trusting(key))
	return &env{store: st, cache: newCache(t, st, budget), root: t.TempDir(), key: key}
}

// newCache opens a chunk cache of st in a new directory.
func newCache(t testing.TB, st *registry.Store, budget int64) *registry.Cache {
	t.Helper()
	c, err := registry.OpenCache(filepath.Join(t.TempDir(), "chunks"), budget, st)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// openMemory opens the memory file of rm lazily through c.
func openMemory(t testing.TB, c *registry.Cache, rm *registry.RemoteManifest) *registry.LazyFile {
	t.Helper()
	lf, err := c.Open(context.Background(), rm, snapshot.MemoryFile)
	if err != nil {
		t.Fatal(err)
	}
	return lf
}

// openMinIO opens a store on srv's bucket with the tests' chunk size.
func openMinIO(t testing.TB, srv *miniotest.Server) (registry.Config, *registry.Store) {
	t.Helper()
	cfg := srv.Config
	cfg.ChunkSize = cs
	st, err := registry.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, st
}

// envMaker makes a test's env: newEnv (MinIO) or newEnvFS.
type envMaker func(testing.TB, int64) *env

// eachStore runs fn on MinIO and on a directory store.
func eachStore(t *testing.T, fn func(*testing.T, envMaker)) {
	t.Run("minio", func(t *testing.T) { fn(t, newEnv) })
	t.Run("fs", func(t *testing.T) { fn(t, newEnvFS) })
}

// count is how many objects start with prefix.
func (e *env) count(t testing.TB, prefix string) int {
	t.Helper()
	n := 0
	for _, err := range e.store.Objects().List(context.Background(), prefix) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	return n
}

// get reads an object whole, behind the registry's back.
func (e *env) get(t testing.TB, key string) []byte {
	t.Helper()
	b, _, err := e.store.Objects().Get(context.Background(), key, objstore.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// put writes an object behind the registry's back.
func (e *env) put(t testing.TB, key string, b []byte) {
	t.Helper()
	if err := e.store.Objects().Put(context.Background(), key, b, objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// pushNew writes a snapshot of the base layout and pushes it.
func pushNew(t testing.TB, e *env, id string) (*fixture, *registry.RemoteManifest, registry.PushStats) {
	t.Helper()
	fx := makeSnapshot(t, e.root, id, baseRegions())
	rm, st := push(t, e, fx)
	return fx, rm, st
}

// push pushes a snapshot written by makeSnapshot.
func push(t testing.TB, e *env, fx *fixture) (*registry.RemoteManifest, registry.PushStats) {
	t.Helper()
	rm, st, err := e.store.Push(context.Background(), fx.dir, registry.PushInfo{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return rm, st
}
