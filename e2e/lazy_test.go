package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/restore/lazytest"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// lazyChunkDelay is the injected fetch time of one 512 KiB chunk: an
// object store's GET of that size on a fast network.
const lazyChunkDelay = 5 * time.Millisecond

// lazyFunctions are the functions TestLazyRestore runs: hello always,
// more with THAW_LAZY_FUNCTIONS=hello,image (the measurement).
var lazyFunctions = map[string]struct{ event, want string }{
	"hello": {`{"name":"lazy"}`, "hello, lazy!"},
	"image": {`{"size":512,"seed":1,"angle":90}`, `"input": "inline"`},
}

// TestLazyRestore restores real VMs whose memory file is not used: QEMU
// opens a placeholder (sparse, all holes) and every page comes from a
// memory source (lazytest: the real memory file's bytes, each 512 KiB
// chunk fetched once with a delay). vanilla, reap and faasnap answer
// correctly, read far less than the memory file and never touch the
// placeholder; cached refuses with an error saying to pull the snapshot; a
// source that fails ends the restore with an error naming it.
func TestLazyRestore(t *testing.T) {
	parallel(t)
	var current atomic.Pointer[lazyMemory]
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.VMMPool = -1 // a standby VM would be planned with whatever source was current
		c.MemorySource = func(context.Context, string) (restore.MemorySource, string, error) {
			if m := current.Load(); m != nil {
				return m.src, m.placeholder, nil
			}
			return nil, "", nil
		}
	})
	c := e.c
	ctx := ctxT(t)
	for _, name := range lazyNames(t) {
		fn := lazyFunctions[name]
		t.Run(name, func(t *testing.T) {
			lc := prepareLazyCase(t, c, ctx, &current, name, fn)
			for _, k := range []restore.Kind{restore.Vanilla, restore.REAP, restore.FaaSnap} {
				t.Run(string(k), func(t *testing.T) { lc.checkLazyStrategy(t, k) })
			}
			lc.logLocalRestores(t)
			t.Run("cached refuses", func(t *testing.T) { lc.checkCachedRefuses(t) })
			// A source that fails at once (the device state load reads
			// guest memory), and one that fails once the guest runs.
			for _, c := range []struct {
				name      string
				failAfter uint64
			}{{"source failure", 0}, {"source failure while running", 300}} {
				t.Run(c.name, func(t *testing.T) { lc.checkSourceFailure(t, c.failAfter) })
			}
		})
	}
}

// lazyCase is one function of TestLazyRestore, prepared, with its warm
// snapshot's memory file measured.
type lazyCase struct {
	c            *client.Client
	ctx          context.Context
	current      *atomic.Pointer[lazyMemory]
	name         string
	fn           struct{ event, want string }
	res          *client.PrepareResult
	mem          string
	zs           memlayout.ZeroStats
	nonzeroBytes uint64
}

// prepareLazyCase creates and prepares the function and measures its warm
// snapshot's memory file.
func prepareLazyCase(t *testing.T, c *client.Client, ctx context.Context, current *atomic.Pointer[lazyMemory], name string, fn struct{ event, want string }) *lazyCase {
	t.Helper()
	createFunction(t, c, name, "functions/"+name)
	res, err := c.Prepare(ctx, name, ev(fn.event), client.PrepareOptions{})
	if err != nil || builds(res).FaaSnap == nil || builds(res).REAP == nil {
		t.Fatalf("prepare: %v %+v", err, res)
	}
	mem := filepath.Join(res.Warm.Dir, snapshot.MemoryFile)
	nonzero, zs, err := memlayout.ZeroScan(mem)
	if err != nil {
		t.Fatal(err)
	}
	var nonzeroBytes uint64
	for _, r := range nonzero {
		nonzeroBytes += r.Bytes()
	}
	t.Logf("%s: memory file %d MiB, non-zero %.1f MiB; reap working set %.1f MiB (%d pages); faasnap loading set %.1f MiB (working set %d pages)",
		name, zs.Size>>20, mib(nonzeroBytes), mib(uint64(builds(res).REAP.WorkingSetBytes)), builds(res).REAP.FaultedPages,
		mib(uint64(builds(res).FaaSnap.LoadingSetBytes)), builds(res).FaaSnap.WorkingSetPages)
	return &lazyCase{c: c, ctx: ctx, current: current, name: name, fn: fn, res: res, mem: mem, zs: zs, nonzeroBytes: nonzeroBytes}
}

// invoke invokes the function with strategy k and its memory from src, a
// placeholder standing for the memory file, and checks QEMU neither read
// nor wrote the placeholder.
func (lc *lazyCase) invoke(t *testing.T, k restore.Kind, src *lazytest.Source) (*client.Invocation, error) {
	c, ctx, current, name, fn, res := lc.c, lc.ctx, lc.current, lc.name, lc.fn, lc.res
	ph := filepath.Join(t.TempDir(), "memory.placeholder")
	if err := lazytest.Placeholder(ph, src.Size()); err != nil {
		t.Fatal(err)
	}
	current.Store(&lazyMemory{src, ph})
	defer current.Store(nil)
	inv, err := c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: string(k), Snapshot: res.Warm.ID})
	resident, _, rerr := pagecache.Resident(ph)
	holes, herr := lazytest.AllHoles(ph)
	if err := errors.Join(rerr, herr); err != nil || resident != 0 || !holes {
		t.Errorf("%s: placeholder read or written: %d pages resident, all holes %v (%v)", k, resident, holes, err)
	}
	return inv, err
}

// checkLazyStrategy restores with k from a lazy source: it answers
// correctly and reads far less than the memory file.
func (lc *lazyCase) checkLazyStrategy(t *testing.T, k restore.Kind) {
	name, fn, res, mem, zs, nonzeroBytes, invoke := lc.name, lc.fn, lc.res, lc.mem, lc.zs, lc.nonzeroBytes, lc.invoke
	src, err := lazytest.Open(mem, lazyChunkDelay)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	inv, err := invoke(t, k, src)
	if err != nil {
		t.Fatal(err)
	}
	st := partStats(inv.StrategyStats)
	if !inv.OK || !strings.Contains(string(inv.Result), fn.want) || inv.Strategy != string(k) || st == nil || st.Fallback != "" {
		t.Fatalf("invocation %+v %s", inv, inv.Result)
	}
	// reap and faasnap may read nothing from the source: their
	// local sets can hold every page the guest touches.
	if !st.Lazy || st.SourceFaults+st.LoaderPages+st.PrefetchPages == 0 || (k == restore.Vanilla && st.SourceFetchedBytes == 0) {
		t.Fatalf("lazy stats %+v", st.LazyStats)
	}
	// The guest's answer came from the source and the local
	// sets: the placeholder is all zeros, QEMU never read it
	// (checked in invoke). What the source fetched (whole
	// 512 KiB chunks) stays below the non-zero memory.
	if st.SourceBytes > uint64(zs.Size)/8 || st.SourceFetchedBytes >= nonzeroBytes {
		t.Errorf("read %d and fetched %d bytes; memory file %d bytes, %d non-zero", st.SourceBytes, st.SourceFetchedBytes, zs.Size, nonzeroBytes)
	}
	if k == restore.REAP && st.PrefetchPages != uint64(builds(res).REAP.FaultedPages) {
		t.Errorf("reap prefetched %d pages, recorded %d", st.PrefetchPages, builds(res).REAP.FaultedPages)
	}
	if k == restore.FaaSnap && st.LoaderPages+st.LoaderExisting != uint64(builds(res).FaaSnap.LoadingSetBytes)/4096 {
		t.Errorf("faasnap loader installed %d + %d pages, loading set %d bytes", st.LoaderPages, st.LoaderExisting, builds(res).FaaSnap.LoadingSetBytes)
	}
	r := inv.Timing.Restore
	t.Logf("%s/%-7s source: %d faults, %.2f MiB read (%.1f ms), %.2f MiB fetched in %d chunks, %d hits; loader %d pages (%d faulted first, finished first %v); ls faults %d, zero faults %d; set-up %.1f ms, resume %.1f ms, total %.1f ms",
		name, k, st.SourceFaults, mib(st.SourceBytes), st.SourceReadMS, mib(st.SourceFetchedBytes), st.SourceFetchedChunks,
		st.SourceCacheHits, st.LoaderPages, st.LoaderExisting, deref(st.LoaderBeforeInvoke), st.LoadingSetFaults, st.ZeroFaults,
		r.SetupMS, r.ResumeMS, inv.Timing.TotalMS)
}

// logLocalRestores runs the same strategies from the local memory file,
// cache evicted: the reference the lazy numbers compare with.
func (lc *lazyCase) logLocalRestores(t *testing.T) {
	t.Helper()
	c, ctx, name, fn, res := lc.c, lc.ctx, lc.name, lc.fn, lc.res
	for _, k := range []restore.Kind{restore.Vanilla, restore.REAP, restore.FaaSnap} {
		inv, err := c.InvokeFunction(ctx, name, ev(fn.event), client.InvokeOptions{Strategy: string(k), Snapshot: res.Warm.ID, EvictCache: true})
		if err != nil || !inv.OK || inv.StrategyStats.Lazy {
			t.Fatalf("local %s: %v %+v", k, err, inv)
		}
		t.Logf("%s/%-7s local: set-up %.1f ms, resume %.1f ms, total %.1f ms, %.2f MiB read by QEMU",
			name, k, inv.Timing.Restore.SetupMS, inv.Timing.Restore.ResumeMS, inv.Timing.TotalMS, mib(inv.Process.ReadBytes))
	}
}

// checkCachedRefuses: cached refuses a memory source, saying to pull the
// snapshot, and reads nothing from it.
func (lc *lazyCase) checkCachedRefuses(t *testing.T) {
	mem, invoke := lc.mem, lc.invoke
	src, err := lazytest.Open(mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	_, err = invoke(t, restore.Cached, src)
	if err == nil || !strings.Contains(err.Error(), "pull the snapshot first") {
		t.Fatalf("cached with a memory source: %v", err)
	}
	if src.ReadCalls() != 0 {
		t.Fatalf("a refused restore read the source %d times", src.ReadCalls())
	}
}

// checkSourceFailure: a source that fails after failAfter reads ends the
// restore with an error naming it, in time.
func (lc *lazyCase) checkSourceFailure(t *testing.T, failAfter uint64) {
	mem, invoke := lc.mem, lc.invoke
	src, err := lazytest.Open(mem, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	src.FailAfter(failAfter)
	start := time.Now()
	inv, err := invoke(t, restore.Vanilla, src)
	if err == nil {
		t.Fatalf("restore with a failing source answered: %+v", inv)
	}
	if !strings.Contains(err.Error(), lazytest.ErrFetch.Error()) {
		t.Errorf("the error does not say the source failed: %v", err)
	}
	t.Logf("after %v and %d reads: %v", time.Since(start).Round(time.Millisecond), src.ReadCalls(), err)
	if time.Since(start) > 30*time.Second {
		t.Errorf("the failure took %v", time.Since(start))
	}
}

// lazyNames are the functions the lazy tests run: hello, or those named by
// THAW_LAZY_FUNCTIONS (the measurements).
func lazyNames(t *testing.T) []string {
	names := []string{"hello"}
	if v := os.Getenv("THAW_LAZY_FUNCTIONS"); v != "" {
		names = strings.Split(v, ",")
	}
	for _, name := range names {
		if _, ok := lazyFunctions[name]; !ok {
			t.Fatalf("THAW_LAZY_FUNCTIONS: no event for %q", name)
		}
	}
	return names
}

type lazyMemory struct {
	src         restore.MemorySource
	placeholder string
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func deref(b *bool) bool { return b != nil && *b }
