package registry_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

func pullTo(t *testing.T, e *env, id string) (string, error) {
	t.Helper()
	rm, err := e.store.GetManifest(context.Background(), id)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(t.TempDir(), id)
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	return dst, e.cache.PullInto(context.Background(), rm, dst, nil)
}

func TestPushPullRoundTrip(t *testing.T) { eachStore(t, testPushPullRoundTrip) }

func testPushPullRoundTrip(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	fx := makeSnapshot(t, e.root, "snap-a1", baseRegions())
	var last int64
	rm, st, err := e.store.Push(context.Background(), fx.dir, registry.PushInfo{Parent: "snap-p"}, func(done, total int64) { last = done })
	if err != nil {
		t.Fatal(err)
	}
	// memory: chunks 0,1,2,20,63 (chunk 5 holds written zeros: left out).
	mem := rm.File(snapshot.MemoryFile)
	var idx []int64
	for _, c := range mem.Chunks {
		idx = append(idx, c.Index)
	}
	if want := []int64{0, 1, 2, 20, 63}; !slices.Equal(idx, want) {
		t.Fatalf("memory chunks %v, want %v", idx, want)
	}
	if len(rm.Prefetch) != 1 || rm.Prefetch[0] != "strategies/reap/ws.bin" {
		t.Fatalf("prefetch %v", rm.Prefetch)
	}
	if last == 0 || st.Uploaded != st.Chunks {
		t.Fatalf("progress %d, stats %+v", last, st)
	}
	if n := e.count(t, "chunks/"); n != st.Chunks {
		t.Fatalf("%d chunk objects, want %d distinct non-zero chunks", n, st.Chunks)
	}
	dst, err := pullTo(t, e, fx.id)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, fx.dir, dst)
	if _, _, err := snapshot.Check(dst, nil); err != nil {
		t.Fatalf("pulled snapshot does not verify: %v", err)
	}
	var sys syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, snapshot.MemoryFile), &sys); err != nil {
		t.Fatal(err)
	}
	if alloc := sys.Blocks * 512; alloc > 6*cs {
		t.Fatalf("pulled memory allocates %d bytes: holes were filled", alloc)
	}
	got, err := e.store.GetManifest(context.Background(), fx.id)
	if err != nil || got.Parent != "snap-p" {
		t.Fatalf("manifest %+v %v", got, err)
	}
}

func TestDedupAcrossSnapshots(t *testing.T) { eachStore(t, testDedupAcrossSnapshots) }

func testDedupAcrossSnapshots(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	a := makeSnapshot(t, e.root, "snap-a", baseRegions())
	// b: the same memory but one chunk changed and one added.
	b := makeSnapshot(t, e.root, "snap-b", append(baseRegions(), region{1 * cs, cs, 7}, region{30 * cs, cs, 8}))
	_, sa := push(t, e, a)
	_, sb := push(t, e, b)
	// b uploads its changed and new memory chunk, its vmstate (other
	// seed) and its manifest.json; memory and ws.bin chunks are shared.
	if sb.Uploaded >= sa.Uploaded/2 || sb.Uploaded == 0 {
		t.Fatalf("second push uploaded %d of %d chunks (first: %d): no sharing", sb.Uploaded, sb.Chunks, sa.Uploaded)
	}
	if n := e.count(t, "chunks/"); n != sa.Uploaded+sb.Uploaded {
		t.Fatalf("%d chunk objects, want %d", n, sa.Uploaded+sb.Uploaded)
	}
	dst, err := pullTo(t, e, b.id)
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, b.dir, dst)
}

func TestCorruptChunkRefusedAndRefetched(t *testing.T) {
	eachStore(t, testCorruptChunkRefusedAndRefetched)
}

func testCorruptChunkRefusedAndRefetched(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	fx, rm, _ := pushNew(t, e, "snap-c")
	ref := rm.File(snapshot.MemoryFile).Chunks[1]
	key := "chunks/" + ref.SHA256[:2] + "/" + ref.SHA256
	orig := e.get(t, key)
	// A valid zstd frame of other bytes: decompresses fine, wrong digest.
	other := makeSnapshot(t, e.root, "snap-other", []region{{0, cs, 42}})
	orm, _ := push(t, e, other)
	oref := orm.File(snapshot.MemoryFile).Chunks[0]
	wrong := e.get(t, "chunks/"+oref.SHA256[:2]+"/"+oref.SHA256)
	for _, bad := range [][]byte{[]byte("not zstd at all"), wrong} {
		e.put(t, key, bad)
		before := e.cache.Stats().FetchedBytes
		_, err := pullTo(t, e, fx.id)
		if !errors.Is(err, registry.ErrCorrupt) {
			t.Fatalf("pull with a corrupt chunk: %v, want ErrCorrupt", err)
		}
		if got := e.cache.Stats().FetchedBytes - before; got < int64(registry.FetchAttempts*len(bad)) {
			t.Fatalf("fetched %d bytes: the corrupt chunk was not fetched %d times", got, registry.FetchAttempts)
		}
		if e.cache.Has(ref.SHA256) {
			t.Fatal("the corrupt chunk entered the cache")
		}
	}
	e.put(t, key, orig)
	// Another snapshot's manifest under this id is refused.
	e.put(t, "snapshots/snap-c2/manifest.json", e.get(t, "snapshots/snap-c/manifest.json"))
	if _, err := e.store.GetManifest(context.Background(), "snap-c2"); !errors.Is(err, registry.ErrUntrusted) {
		t.Fatalf("a manifest under another id: %v", err)
	}
	dst, err := pullTo(t, e, fx.id)
	if err != nil {
		t.Fatalf("pull after the object was repaired: %v", err)
	}
	sameTree(t, fx.dir, dst)
}

func TestStoreDownIsUnavailableAndCacheStillServes(t *testing.T) {
	e := newEnv(t, 0)
	fx, rm, _ := pushNew(t, e, "snap-d")
	if _, err := pullTo(t, e, fx.id); err != nil {
		t.Fatal(err)
	}
	e.srv.Stop()
	fx2 := makeSnapshot(t, e.root, "snap-d2", []region{{0, cs, 5}})
	if _, _, err := e.store.Push(context.Background(), fx2.dir, registry.PushInfo{}, nil); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("push with the store down: %v, want ErrUnavailable", err)
	}
	if _, err := e.store.GetManifest(context.Background(), fx.id); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("get manifest with the store down: %v", err)
	}
	if err := e.store.Ping(context.Background()); !errors.Is(err, registry.ErrUnavailable) {
		t.Fatalf("ping: %v", err)
	}
	// Everything pulled before is still served from the cache.
	lf := openMemory(t, e.cache, rm)
	defer lf.Close()
	got := make([]byte, lf.Size())
	if _, err := lf.ReadAt(got, 0); err != nil {
		t.Fatalf("read from the cache with the store down: %v", err)
	}
	if !bytes.Equal(got, fx.memory) {
		t.Fatal("cached memory differs")
	}
	dst, err := pullTo(t, e, fx.id)
	if !errors.Is(err, registry.ErrUnavailable) || dst != "" {
		t.Fatalf("pull needs the manifest from the store: %v", err)
	}
}

func TestInterruptedPushResumes(t *testing.T) { eachStore(t, testInterruptedPushResumes) }

func testInterruptedPushResumes(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	fx := makeSnapshot(t, e.root, "snap-i", baseRegions())
	ctx, cancel := context.WithCancel(context.Background())
	_, _, err := e.store.Push(ctx, fx.dir, registry.PushInfo{}, func(done, total int64) {
		if done > 4*mib { // inside the memory file, after its first chunks
			cancel()
		}
	})
	if err == nil {
		t.Fatal("cancelled push succeeded")
	}
	if ok, err := e.store.HasManifest(context.Background(), fx.id); ok || err != nil {
		t.Fatalf("manifest published by an interrupted push (%v)", err)
	}
	sent := e.count(t, "chunks/")
	if sent == 0 {
		t.Fatal("the interrupted push stored nothing: nothing to resume")
	}
	_, st := push(t, e, fx)
	if st.Uploaded != st.Chunks-sent {
		t.Fatalf("resumed push uploaded %d of %d chunks; %d were there", st.Uploaded, st.Chunks, sent)
	}
	if _, err := pullTo(t, e, fx.id); err != nil {
		t.Fatal(err)
	}
}

func TestInterruptedPullResumes(t *testing.T) {
	// The third chunk GET waits for the first two chunks to be in the
	// cache, then cancels the pull; it and every later GET fail with the
	// cancellation, so exactly two chunks are fetched however fast the
	// server is.
	ctx, cancel := context.WithCancel(context.Background())
	var gets atomic.Int64
	var interrupting atomic.Bool
	var e *env
	registry.WrapTransport(t, func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if interrupting.Load() && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/chunks/") && gets.Add(1) > 2 {
				for deadline := time.Now().Add(10 * time.Second); e.cache.Stats().FetchedChunks < 2 && time.Now().Before(deadline); {
					time.Sleep(time.Millisecond)
				}
				cancel()
				<-r.Context().Done()
				return nil, r.Context().Err()
			}
			return rt.RoundTrip(r)
		})
	})
	e = newEnv(t, 0)
	fx, rm, st := pushNew(t, e, "snap-j")
	dst := filepath.Join(t.TempDir(), "x")
	os.Mkdir(dst, 0o700)
	interrupting.Store(true)
	err := e.cache.PullInto(ctx, rm, dst, nil)
	interrupting.Store(false)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled pull: %v, want context.Canceled", err)
	}
	first := e.cache.Stats().FetchedChunks
	if first != 2 || first >= int64(st.Chunks) {
		t.Fatalf("interrupted pull fetched %d of %d chunks, want 2", first, st.Chunks)
	}
	if _, err := pullTo(t, e, fx.id); err != nil {
		t.Fatal(err)
	}
	if again := e.cache.Stats().FetchedChunks - first; again != int64(st.Chunks)-first {
		t.Fatalf("resumed pull fetched %d chunks, want the %d missing", again, int64(st.Chunks)-first)
	}
}

// TestCancelledPullStops: a pull cancelled after its chunks are all fetched
// still ends with the cancellation rather than writing on.
func TestCancelledPullStops(t *testing.T) {
	e := newEnv(t, 0)
	fx, rm, _ := pushNew(t, e, "snap-k")
	if _, err := pullTo(t, e, fx.id); err != nil { // every chunk now cached
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	dst := filepath.Join(t.TempDir(), "x")
	os.Mkdir(dst, 0o700)
	err := e.cache.PullInto(ctx, rm, dst, func(done, total int64) {
		if done > 0 {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("pull cancelled while writing: %v, want context.Canceled", err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestLazyFileReads(t *testing.T) { eachStore(t, testLazyFileReads) }

func testLazyFileReads(t *testing.T, newEnv envMaker) {
	e := newEnv(t, 0)
	fx, rm, _ := pushNew(t, e, "snap-l")
	lf := openMemory(t, e.cache, rm)
	defer lf.Close()
	if lf.Size() != 4*mib {
		t.Fatalf("size %d", lf.Size())
	}
	// Concurrent reads across chunk boundaries and holes: single flight.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, r := range [][2]int64{{cs - 100, 300}, {2*cs - 5, cs + 10}, {19*cs + 1, 2 * cs}, {int64(g) * 4096, 4096}} {
				p := make([]byte, r[1])
				if _, err := lf.ReadAt(p, r[0]); err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(p, fx.memory[r[0]:r[0]+r[1]]) {
					t.Errorf("read at %d+%d differs", r[0], r[1])
				}
			}
		}()
	}
	wg.Wait()
	if st := e.cache.Stats(); st.FetchedChunks != 4 {
		t.Fatalf("fetched %d chunks, want 4 (0, 1, 2, 20 each once)", st.FetchedChunks)
	}
	p := make([]byte, 100)
	if n, err := lf.ReadAt(p, 4*mib-50); n != 50 || err != io.EOF {
		t.Fatalf("read past the end: %d %v", n, err)
	}
	if err := <-lf.Prefetch(context.Background(), 0, lf.Size()); err != nil {
		t.Fatal(err)
	}
	if st := e.cache.Stats(); st.FetchedChunks != 5 {
		t.Fatalf("after prefetch %d chunks fetched, want 5", st.FetchedChunks)
	}
	// The hit path allocates nothing.
	buf := make([]byte, 4096)
	if a := testing.AllocsPerRun(100, func() { _, _ = lf.ReadAt(buf, cs+8192) }); a != 0 {
		t.Fatalf("ReadAt on a cached chunk allocates %.1f times", a)
	}
}

func TestCacheEvictionRespectsBudgetAndPins(t *testing.T) {
	e := newEnv(t, 3*cs)
	a := makeSnapshot(t, e.root, "snap-e1", []region{{0, 4 * cs, 11}})
	b := makeSnapshot(t, e.root, "snap-e2", []region{{0, 4 * cs, 12}})
	ra, _ := push(t, e, a)
	rb, _ := push(t, e, b)
	la := openMemory(t, e.cache, ra)
	if err := <-la.Prefetch(context.Background(), 0, la.Size()); err != nil {
		t.Fatal(err)
	}
	lb := openMemory(t, e.cache, rb)
	if err := <-lb.Prefetch(context.Background(), 0, lb.Size()); err != nil {
		t.Fatal(err)
	}
	lb.Close()
	// a's 4 chunks are pinned: kept although over budget; b's evicted.
	for _, c := range ra.File(snapshot.MemoryFile).Chunks {
		if !e.cache.Has(c.SHA256) {
			t.Fatal("a pinned chunk was evicted")
		}
	}
	if st := e.cache.Stats(); st.UsedBytes != 4*cs {
		t.Fatalf("cache holds %d bytes, want only the 4 pinned chunks", st.UsedBytes)
	}
	la.Close()
	if st := e.cache.Stats(); st.UsedBytes > 3*cs {
		t.Fatalf("cache holds %d bytes after unpinning, budget %d", st.UsedBytes, 3*cs)
	}
	// A reopened cache finds its chunks, verifies them before use, and
	// refetches one damaged on disk.
	c2, err := registry.OpenCache(e.cache.Dir(), 3*cs, e.store)
	if err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(e.cache.Dir(), "*", "*"))
	if len(files) == 0 {
		t.Fatal("no chunk files")
	}
	os.WriteFile(files[0], []byte("damaged"), 0o600)
	l2 := openMemory(t, c2, ra)
	defer l2.Close()
	got := make([]byte, l2.Size())
	if _, err := l2.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, a.memory) {
		t.Fatal("reopened cache served other bytes")
	}
}

// Over HTTPS with a private CA: the CA file makes the store trusted;
// without it the certificate is refused with a clear error, not "store
// unavailable".
func TestTLSWithCAFile(t *testing.T) {
	cfg, st := openMinIO(t, miniotest.StartTLS(t))
	st = st.WithTrust(trusting(newKey(t)))
	fx := makeSnapshot(t, t.TempDir(), "snap-tls", baseRegions())
	rm, _, err := st.Push(context.Background(), fx.dir, registry.PushInfo{}, nil)
	if err != nil {
		t.Fatalf("push over TLS: %v", err)
	}
	c := newCache(t, st, 0)
	dst := filepath.Join(t.TempDir(), "x")
	os.Mkdir(dst, 0o700)
	if err := c.PullInto(context.Background(), rm, dst, nil); err != nil {
		t.Fatalf("pull over TLS: %v", err)
	}
	sameTree(t, fx.dir, dst)

	cfg.CAFile = ""
	untrusted, err := registry.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	err = untrusted.Ping(context.Background())
	if err == nil || errors.Is(err, registry.ErrUnavailable) || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusted certificate: %v", err)
	}
	cfg.CAFile = filepath.Join(t.TempDir(), "none.pem")
	os.WriteFile(cfg.CAFile, []byte("not pem"), 0o600)
	if _, err := registry.Open(cfg); err == nil || !strings.Contains(err.Error(), "no PEM certificate") {
		t.Fatalf("CA file without a certificate: %v", err)
	}
}
