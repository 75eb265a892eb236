package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
	"github.com/thaw-dev/thaw/internal/signing"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// TestLazyRemoteRestore: daemon A prepares a function and pushes it to a
// real MinIO; daemons that never saw it (each its own data directory and
// chunk cache) invoke it and import it lazily: the memory stays in the
// registry and vanilla, reap and faasnap restore it page by page through
// the chunk cache; cached, premap and snapbpf pull it first; a full pull
// completes a lazy snapshot in place. A corrupt chunk object is refused
// (422, no VM left) and fetched again once repaired; with MinIO stopped a
// restore whose chunks are cached works and one that needs a missing
// chunk is 503 registry_unavailable. THAW_LAZY_FUNCTIONS=hello,image runs
// more functions (the measurement).
func TestLazyRemoteRestore(t *testing.T) {
	parallel(t)
	srv := miniotest.Start(t)
	cfg := func(c *daemon.Config) {
		rc := srv.Config
		c.Registry = &rc
		c.VMMPool = -1 // no standby VMs: one VM per restore measured
		if v := os.Getenv("THAW_LAZY_READAHEAD"); v != "" {
			c.LazyReadahead, _ = strconv.Atoi(v) // the measurement of thawd --lazy-readahead
		}
	}
	a := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { cfg(c); c.RegistryPushOnPrepare = true })
	cfg = trustingNode(t, a, cfg) // every other node imports what a publishes
	ctx := ctxT(t)
	for _, name := range lazyNames(t) {
		fn := lazyFunctions[name]
		rc := pushRemoteCase(t, srv, a, cfg, ctx, name, fn)
		rc.logLocalReference(t)

		nodes := map[string]*env{}
		for _, k := range []string{"vanilla", "reap", "faasnap", "concurrent"} {
			nodes[k] = startEnvWith(t, t.TempDir(), cfg)
		}
		rc.nodes = nodes
		t.Run(name+"/lazy", rc.checkLazyImports)
		if t.Failed() {
			return
		}

		t.Run(name+"/concurrent import", rc.checkConcurrentImport)
		t.Run(name+"/pull first", rc.checkPullFirst)
		t.Run(name+"/corrupt chunk", rc.checkCorruptChunk)
		t.Run(name+"/registry down", rc.checkRegistryDown)
	}
}

// remoteCase is one function of TestLazyRemoteRestore: prepared and
// pushed by daemon a, and the nodes that import it.
type remoteCase struct {
	srv          *miniotest.Server
	a            *env
	cfg          func(*daemon.Config)
	ctx          context.Context
	name         string
	fn           struct{ event, want string }
	warm         string
	nonzeroBytes uint64
	nodes        map[string]*env
}

// pushRemoteCase creates and prepares the function on a, pushes its warm
// snapshot, and logs the sizes of its memory and what the registry holds.
func pushRemoteCase(t *testing.T, srv *miniotest.Server, a *env, cfg func(*daemon.Config), ctx context.Context, name string, fn struct{ event, want string }) *remoteCase {
	t.Helper()
	createFunction(t, a.c, name, "functions/"+name)
	res, err := a.c.Prepare(ctx, name, ev(fn.event), client.PrepareOptions{})
	if err != nil || builds(res).FaaSnap == nil || builds(res).REAP == nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	warm := res.Warm.ID
	if _, err := a.c.PushSnapshot(ctx, warm); err != nil {
		t.Fatalf("push: %v", err)
	}
	nonzero, zs, err := memlayout.ZeroScan(filepath.Join(res.Warm.Dir, snapshot.MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	var nonzeroBytes uint64
	for _, r := range nonzero {
		nonzeroBytes += r.Bytes()
	}
	rc := &remoteCase{srv: srv, a: a, cfg: cfg, ctx: ctx, name: name, fn: fn, warm: warm, nonzeroBytes: nonzeroBytes}
	rc.logStoredSizes(t, res, zs)
	return rc
}

// logStoredSizes logs the memory file's size, its non-zero part and what
// the registry stores of it and of faasnap's loading set.
func (rc *remoteCase) logStoredSizes(t *testing.T, res *client.PrepareResult, zs memlayout.ZeroStats) {
	t.Helper()
	srv, a, ctx, name, warm, nonzeroBytes := rc.srv, rc.a, rc.ctx, rc.name, rc.warm, rc.nonzeroBytes
	st, err := registry.Open(srv.Config)
	if err != nil {
		t.Fatal(err)
	}
	st = st.WithTrust(registry.Trust{Keys: signing.NewKeyring(a.svc.RegistryKey())})
	rm, err := st.GetManifest(ctx, warm)
	if err != nil {
		t.Fatal(err)
	}
	stored := func(path string) (n int, b int64) {
		for _, ch := range rm.File(path).Chunks {
			n, b = n+1, b+ch.Stored
		}
		return n, b
	}
	mc, mb := stored(snapshot.MemoryFile)
	lc, lb := stored("strategies/faasnap/loadingset.bin")
	t.Logf("%s: memory %d MiB, non-zero %.1f MiB (%d chunks, %.1f MiB compressed in the registry); reap working set %.1f MiB; faasnap loading set %.1f MiB (%d chunks, %.1f MiB compressed)",
		name, zs.Size>>20, mib(nonzeroBytes), mc, mib(uint64(mb)), mib(uint64(builds(res).REAP.WorkingSetBytes)),
		mib(uint64(builds(res).FaaSnap.LoadingSetBytes)), lc, mib(uint64(lb)))
}

// check checks inv answered correctly, with strategy, from the warm
// snapshot, without falling back.
func (rc *remoteCase) check(t *testing.T, inv *client.Invocation, err error, strategy string) {
	fn, warm := rc.fn, rc.warm
	t.Helper()
	if err != nil || !inv.OK || !strings.Contains(string(inv.Result), fn.want) || inv.Strategy != strategy || inv.Snapshot != warm {
		t.Fatalf("%s invocation: %v %+v", strategy, err, inv)
	}
	if st := partStats(inv.StrategyStats); st != nil && st.Fallback != "" {
		t.Fatalf("%s fell back: %s", strategy, st.Fallback)
	}
}

// logLocalReference logs the reference: the same snapshot restored from
// A's local file.
func (rc *remoteCase) logLocalReference(t *testing.T) {
	t.Helper()
	a, ctx, name, fn, warm, check := rc.a, rc.ctx, rc.name, rc.fn, rc.warm, rc.check
	for _, k := range []string{"vanilla", "reap", "faasnap"} {
		inv, err := a.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: k, Snapshot: warm, EvictCache: true})
		check(t, inv, err, k)
		t.Logf("%s/%-7s local (A, cache evicted): set-up %.1f ms, total %.1f ms", name, k, inv.Timing.Restore.SetupMS, inv.Timing.TotalMS)
	}
}

// checkLazyImports: a node that never saw the function imports it lazily
// with vanilla, reap and faasnap, fetching less than the non-zero memory,
// and restores it again from its chunk cache.
func (rc *remoteCase) checkLazyImports(t *testing.T) {
	nodes, ctx, name, fn, warm, nonzeroBytes, check := rc.nodes, rc.ctx, rc.name, rc.fn, rc.warm, rc.nonzeroBytes, rc.check
	for _, k := range []string{"vanilla", "reap", "faasnap"} {
		b := nodes[k]
		// reap is the remote strategy: a request that names none gets it.
		named := k
		if k == "reap" {
			named = ""
		}
		inv, err := b.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: named})
		check(t, inv, err, k)
		if inv.Strategy != k {
			t.Fatalf("an import asking for strategy %q restored with %q", named, inv.Strategy)
		}
		snaps, err := b.c.ListSnapshots(ctx, name)
		if err != nil || len(snaps) != 1 || snaps[0].Memory != client.MemoryRemote {
			t.Fatalf("snapshots after an import: %v %+v", err, snaps)
		}
		st, r := partStats(inv.StrategyStats), inv.Timing.Restore
		if inv.Timing.ImportMS <= 0 || r.Source != "registry" || st == nil || !st.Lazy {
			t.Fatalf("lazy invocation: timing %+v restore %+v stats %+v", inv.Timing, r, st)
		}
		if st.SourceFetchedBytes >= nonzeroBytes {
			t.Errorf("%s fetched %d bytes for memory, non-zero memory is %d", k, st.SourceFetchedBytes, nonzeroBytes)
		}
		cs := b.svc.ChunkCache().Stats()
		t.Logf("%s/%-7s lazy (new node): import %.1f ms; memory fetched %.2f MiB in %d chunks (%d faults, %d cache hits), loading set fetched %.2f MiB in %d chunks (loader %d pages, %d faulted first, %d ls faults); node fetched %.2f MiB in all (import too); set-up %.1f ms (vmm start %.1f, load state %.1f), resume %.1f ms, total %.1f ms",
			name, k, inv.Timing.ImportMS, mib(st.SourceFetchedBytes), st.SourceFetchedChunks, st.SourceFaults, st.SourceCacheHits,
			mib(st.LoadingSetFetchedBytes), st.LoadingSetFetchedChunks, st.LoaderPages, st.LoaderExisting, st.LoadingSetFaults,
			mib(uint64(cs.FetchedBytes)), r.SetupMS, r.VMMStartMS, r.LoadStateMS, r.ResumeMS, inv.Timing.TotalMS)
		if tot := uint64(cs.FetchedBytes); k == "reap" && tot >= nonzeroBytes/2 {
			t.Errorf("reap's node fetched %d bytes in all, non-zero memory is %d", tot, nonzeroBytes)
		}
		// Again on the same node: every chunk in the cache.
		inv, err = b.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: named, Snapshot: warm})
		check(t, inv, err, k)
		if inv.Strategy != k {
			t.Fatalf("a lazy snapshot asking for strategy %q restored with %q", named, inv.Strategy)
		}
		t.Logf("%s/%-7s lazy, chunks cached: fetched %.2f MiB, set-up %.1f ms, total %.1f ms", name, k,
			mib(inv.StrategyStats.SourceFetchedBytes), inv.Timing.Restore.SetupMS, inv.Timing.TotalMS)
	}
}

// checkConcurrentImport: two invocations importing at once on one node
// make one snapshot.
func (rc *remoteCase) checkConcurrentImport(t *testing.T) {
	nodes, ctx, name, fn, check := rc.nodes, rc.ctx, rc.name, rc.fn, rc.check
	b := nodes["concurrent"]
	kinds := []string{"vanilla", "reap"}
	invs, errs := atOnce(len(kinds), func(i int) (*client.Invocation, error) {
		return b.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: kinds[i]})
	})
	check(t, invs[0], errs[0], "vanilla")
	check(t, invs[1], errs[1], "reap")
	if invs[0].Timing.ImportMS+invs[1].Timing.ImportMS <= 0 {
		t.Fatal("neither invocation imported")
	}
	snaps, err := b.c.ListSnapshots(ctx, name)
	if err != nil || len(snaps) != 1 {
		t.Fatalf("snapshots after two concurrent imports: %v %+v", err, snaps)
	}
}

// checkPullFirst: cached, snapbpf and premap pull a lazy snapshot first;
// a full pull completes it in place.
func (rc *remoteCase) checkPullFirst(t *testing.T) {
	nodes, ctx, name, fn, warm, check := rc.nodes, rc.ctx, rc.name, rc.fn, rc.warm, rc.check
	// cached on a lazy snapshot: the memory is pulled, then restored.
	b := nodes["reap"]
	inv, err := b.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "cached", Snapshot: warm})
	check(t, inv, err, "cached")
	if inv.Timing.Restore.PullMS <= 0 || inv.Timing.Restore.Source != "registry" {
		t.Fatalf("cached on a lazy snapshot: %+v", inv.Timing.Restore)
	}
	t.Logf("%s/cached on a lazy snapshot: pulled in %.1f ms, set-up %.1f ms", name, inv.Timing.Restore.PullMS, inv.Timing.Restore.SetupMS)
	sn, err := b.c.GetSnapshot(ctx, warm)
	if err != nil || sn.Memory != client.MemoryLocal {
		t.Fatalf("after the pull: %v %+v", err, sn)
	}
	// An explicit full pull completes another node's lazy snapshot.
	c := nodes["vanilla"].c
	pr, err := c.PullSnapshot(ctx, client.PullRequest{Snapshot: warm})
	if err != nil || !pr.Completed || pr.Snapshot.Memory != client.MemoryLocal {
		t.Fatalf("full pull of a lazy snapshot: %v %+v", err, pr)
	}
	if _, err := c.VerifySnapshot(ctx, warm); err != nil {
		t.Fatalf("completed snapshot does not verify: %v", err)
	}
	if _, err := c.PullSnapshot(ctx, client.PullRequest{Snapshot: warm}); !errors.Is(err, client.ErrConflict) {
		t.Fatalf("pull of a complete snapshot: %v", err)
	}
	for _, k := range []string{"vanilla", "snapbpf", "cached"} {
		inv, err := c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: k, Snapshot: warm})
		check(t, inv, err, k)
		if inv.Timing.Restore.Source != "local" || inv.StrategyStats.Lazy {
			t.Fatalf("%s after completion: %+v %+v", k, inv.Timing.Restore, inv.StrategyStats)
		}
	}
	// premap's store copy of a lazy snapshot: pulled first.
	c = nodes["concurrent"].c
	if _, err := c.StoreSnapshot(ctx, warm); err != nil {
		t.Fatalf("store a lazy snapshot: %v", err)
	}
	if sn, err := c.GetSnapshot(ctx, warm); err != nil || sn.Memory != client.MemoryLocal {
		t.Fatalf("after the store: %v %+v", err, sn)
	}
	inv, err = c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "premap", Snapshot: warm})
	check(t, inv, err, "premap")
}

// lazyNode starts a node of the registry's and pulls the function's
// snapshot lazily into it.
func (rc *remoteCase) lazyNode(t *testing.T) *env {
	t.Helper()
	e := startEnvWith(t, t.TempDir(), rc.cfg)
	if _, err := e.c.PullSnapshot(rc.ctx, client.PullRequest{Function: rc.name, Lazy: true}); err != nil {
		t.Fatalf("lazy pull: %v", err)
	}
	return e
}

// checkCorruptChunk: a corrupt chunk object is refused (no VM left, not
// cached) and fetched again once repaired; a lazy snapshot survives a
// daemon restart.
func (rc *remoteCase) checkCorruptChunk(t *testing.T) {
	srv, cfg, nodes, ctx, name, fn, warm, check := rc.srv, rc.cfg, rc.nodes, rc.ctx, rc.name, rc.fn, rc.warm, rc.check
	e := rc.lazyNode(t)
	// The lazy snapshot survives a daemon restart (and restores after it, below).
	e.stop()
	e = startEnvWith(t, e.dataDir, cfg)
	if sn, err := e.c.GetSnapshot(ctx, warm); err != nil || sn.Memory != client.MemoryRemote {
		t.Fatalf("lazy snapshot after a restart: %v %+v", err, sn)
	}
	// The memory chunks vanilla needed on its node that this one lacks.
	rm := remoteOf(t, e, warm)
	var bad []string
	seen := map[string]bool{} // memory may hold one chunk's bytes at several indexes
	for _, ch := range rm.File(snapshot.MemoryFile).Chunks {
		if !seen[ch.SHA256] && nodeHas(nodes["vanilla"], ch.SHA256) && !e.svc.ChunkCache().Has(ch.SHA256) {
			bad = append(bad, ch.SHA256)
		}
		seen[ch.SHA256] = true
	}
	if len(bad) == 0 {
		t.Fatal("no chunk to corrupt: the lazy pull holds every chunk vanilla needs")
	}
	orig := map[string][]byte{}
	for _, sum := range bad {
		orig[sum] = srv.Get(t, chunkKey(sum))
		srv.Put(t, chunkKey(sum), []byte("not zstd at all"))
	}
	_, err := e.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "vanilla", Snapshot: warm})
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != "snapshot_unusable" || !strings.Contains(err.Error(), "registry") {
		t.Fatalf("restore with corrupt chunks: %v", err)
	}
	t.Logf("corrupt chunk: %v", err)
	noLiveVM(t, e)
	for _, sum := range bad {
		if e.svc.ChunkCache().Has(sum) {
			t.Fatalf("corrupt chunk %s entered the cache", sum[:12])
		}
		srv.Put(t, chunkKey(sum), orig[sum])
	}
	inv, err := e.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "vanilla", Snapshot: warm})
	check(t, inv, err, "vanilla")
}

// checkRegistryDown: with MinIO stopped a restore whose chunks are cached
// works, one that needs a missing chunk is 503 registry_unavailable, and
// an import is 503 and creates nothing.
func (rc *remoteCase) checkRegistryDown(t *testing.T) {
	srv, cfg, nodes, ctx, name, fn, warm, check := rc.srv, rc.cfg, rc.nodes, rc.ctx, rc.name, rc.fn, rc.warm, rc.check
	f := rc.lazyNode(t)
	g := startEnvWith(t, t.TempDir(), cfg)
	// Every chunk of the lazy snapshot in b's cache, the snapshot still lazy.
	b := nodes["faasnap"]
	for _, name := range []string{snapshot.MemoryFile, "strategies/faasnap/loadingset.bin"} {
		lf, err := b.svc.ChunkCache().Open(ctx, remoteOf(t, b, warm), name)
		if err != nil {
			t.Fatal(err)
		}
		err = <-lf.Prefetch(ctx, 0, lf.Size())
		lf.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	srv.Stop()
	defer srv.Restart(t)
	for _, k := range []string{"faasnap", "vanilla"} {
		inv, err := b.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: k, Snapshot: warm})
		check(t, inv, err, k)
		if st := partStats(inv.StrategyStats); !st.Lazy || st.SourceFetchedBytes+st.LoadingSetFetchedBytes != 0 {
			t.Fatalf("%s with the registry down: %+v", k, st.LazyStats)
		}
	}
	// Chunks missing: 503, no VM left behind.
	_, err := f.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "vanilla", Snapshot: warm})
	var apiErr *client.APIError
	if !errors.Is(err, client.ErrUnavailable) || !errors.As(err, &apiErr) || apiErr.Code != "registry_unavailable" {
		t.Fatalf("lazy restore with the registry down: %v", err)
	}
	t.Logf("registry down: %v", err)
	noLiveVM(t, f)
	// An import with the registry down: 503, nothing created.
	_, err = g.c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: "vanilla"})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("import with the registry down: %v", err)
	}
	if fns, err := g.c.ListFunctions(ctx); err != nil || len(fns) != 0 {
		t.Fatalf("functions after a failed import: %v %+v", err, fns)
	}
}

func remoteOf(t *testing.T, e *env, id string) *registry.RemoteManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dataDir, "snapshots", id, ".remote.json"))
	if err != nil {
		t.Fatal(err)
	}
	rm, err := registry.DecodeRemoteManifest(b)
	if err != nil {
		t.Fatal(err)
	}
	return rm
}

// nodeHas says whether e's chunk cache holds the chunk.
func nodeHas(e *env, sum string) bool {
	_, err := os.Stat(filepath.Join(e.dataDir, "chunks", sum[:2], sum))
	return err == nil
}

// noLiveVM waits a little for e's VMs to be stopped (a failed restore's
// VM is killed by the strategy's watch, which may finish after the answer).
func noLiveVM(t *testing.T, e *env) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		vms, err := e.c.ListVMs(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		live := ""
		for _, v := range vms {
			if v.State == "running" || v.State == "booting" {
				live = v.ID + " " + v.State
			}
		}
		if live == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("vm %s 10 s after its restore failed", live)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func chunkKey(sum string) string { return "chunks/" + sum[:2] + "/" + sum }
