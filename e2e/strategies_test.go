package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/restore"
)

// prepareProbe creates the probe function (e2e/testdata/probe) and
// prepares it, recorded with its hello event.
func prepareProbe(t *testing.T, c *client.Client) *client.PrepareResult {
	t.Helper()
	createFunction(t, c, "probe", "e2e/testdata/probe")
	res, err := c.Prepare(ctxT(t), "probe", ev(`{"op":"hello","name":"record"}`), client.PrepareOptions{})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	return res
}

// TestStrategies prepares a function (clean snapshot, FaaSnap record, warm
// snapshot, REAP record, SnapBPF capture) on real VMs, then checks that every strategy gives
// the same answer from the warm snapshot, that reap, faasnap and snapbpf really use
// their artifacts, and that each damaged artifact makes the invocation fall
// back to vanilla and say so.
func TestStrategies(t *testing.T) {
	parallel(t)
	// Room for a standby VM of every strategy (the default pool budget is
	// an eighth of the host's memory).
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.VMMPoolMemoryMiB = 8 << 10 })
	c := e.c
	ctx := ctxT(t)
	sf := newStrategyFixture(t, c, ctx)

	for _, k := range restore.Kinds() {
		t.Run(string(k), func(t *testing.T) { sf.checkStrategy(t, k) })
	}

	t.Run("vmm pool", sf.checkVMMPool)
	t.Run("burst shares one loader", sf.checkBurst)
	t.Run("premap without a store copy falls back", sf.checkPremapUnstored)
	t.Run("damaged artifacts fall back to vanilla", sf.checkDamagedArtifacts)
}

// strategyFixture is the probe function prepared, with every strategy's
// artifacts, and its warm snapshot placed in the memory store.
type strategyFixture struct {
	c     *client.Client
	ctx   context.Context
	res   *client.PrepareResult
	fs    *restore.FaaSnapBuild
	rp    *restore.REAPBuild
	sb    *restore.SnapBPFBuild
	entry *client.StoreEntry
}

// newStrategyFixture prepares the probe function, checks every
// strategy's artifacts were built, and places the warm snapshot in the
// memory store (premap maps it from there).
func newStrategyFixture(t *testing.T, c *client.Client, ctx context.Context) *strategyFixture {
	t.Helper()
	t.Log("preparing (boot + two record invocations)")
	res := prepareProbe(t, c)
	fs, rp, sb := builds(res).FaaSnap, builds(res).REAP, builds(res).SnapBPF
	if fs == nil || rp == nil || sb == nil {
		t.Fatalf("prepare built no artifacts: faasnap %+v reap %+v snapbpf %+v (%s)", fs, rp, sb, builds(res).SnapBPFUnavailable)
	}
	t.Logf("prepared: warm %s, faasnap working set %d pages, loading set %d MiB, reap %d pages",
		res.Warm.ID, fs.WorkingSetPages, fs.LoadingSetBytes>>20, rp.FaultedPages)
	t.Logf("snapbpf: %+v; timing %+v", *sb, res.Timing)
	if fs.WorkingSetPages == 0 || fs.LoadingSetBytes == 0 || rp.FaultedPages == 0 || sb.PrefetchPages == 0 {
		t.Fatalf("prepare built empty artifacts: %+v %+v %+v", *fs, *rp, *sb)
	}
	if sb.CapturedPages != sb.PrefetchPages+sb.FreePagesFiltered || sb.Ranges == 0 {
		t.Fatalf("snapbpf capture inconsistent: %+v", *sb)
	}
	if res.Warm.Parent != res.Clean.ID {
		t.Fatalf("warm snapshot parent %q, want %q", res.Warm.Parent, res.Clean.ID)
	}

	// premap maps the snapshot from the memory store: place it there.
	entry, err := c.StoreSnapshot(ctx, res.Warm.ID)
	if err != nil {
		t.Fatalf("store: %v", err)
	}
	if si, err := c.Store(ctx); err != nil || !si.Available || len(si.Entries) != 1 || si.UsedBytes != entry.Bytes {
		t.Fatalf("store info %+v %v", si, err)
	}
	t.Logf("stored %s: %d MiB in %d regions", res.Warm.ID, entry.Bytes>>20, entry.Regions)
	return &strategyFixture{c: c, ctx: ctx, res: res, fs: fs, rp: rp, sb: sb, entry: entry}
}

// invoke invokes the probe from the warm snapshot with strategy, cache
// evicted, and checks the answer.
func (sf *strategyFixture) invoke(t *testing.T, strategy string) *client.Invocation {
	c, ctx, res := sf.c, sf.ctx, sf.res
	t.Helper()
	inv, err := c.InvokeFunction(ctx, "probe", ev(`{"op":"hello","name":"test"}`),
		client.InvokeOptions{Strategy: strategy, EvictCache: true})
	if err != nil {
		t.Fatalf("%s: %v", strategy, err)
	}
	if !inv.OK || !strings.Contains(string(inv.Result), "hello, test!") {
		t.Fatalf("%s: %+v %s", strategy, inv.Error, inv.Result)
	}
	if inv.Snapshot != res.Warm.ID || !inv.EvictedCache || inv.Process == nil || inv.StrategyStats == nil {
		t.Fatalf("%s: invocation = %+v", strategy, inv)
	}
	return inv
}

// checkStrategy: k gives the same answer and really uses its artifacts.
func (sf *strategyFixture) checkStrategy(t *testing.T, k restore.Kind) {
	invoke, rp, sb, entry := sf.invoke, sf.rp, sf.sb, sf.entry
	inv := invoke(t, string(k))
	st := partStats(inv.StrategyStats)
	if inv.Strategy != string(k) || st.Fallback != "" {
		t.Fatalf("ran as %s (fallback %q)", inv.Strategy, st.Fallback)
	}
	switch k {
	case restore.REAP:
		if st.PrefetchPages != uint64(rp.FaultedPages) || st.PrefetchBytes == 0 {
			t.Fatalf("reap prefetched %d pages (%d bytes), recorded %d", st.PrefetchPages, st.PrefetchBytes, rp.FaultedPages)
		}
	case restore.FaaSnap:
		if st.LayoutEntries == 0 || st.LoaderBytes == 0 || st.LoaderBeforeInvoke == nil {
			t.Fatalf("faasnap stats %+v", st)
		}
	case restore.SnapBPF:
		if st.SnapBPFPages != sb.PrefetchPages || st.SnapBPFRanges != sb.Ranges || st.SnapBPFReadaheadCalls == 0 ||
			st.SnapBPFFinishedFirst == nil || st.SnapBPFError != "" {
			t.Fatalf("snapbpf stats %+v, prepared %+v", st, sb)
		}
		t.Logf("snapbpf prefetch: %d/%d pages resident (%.1f ms to all resident, %.1f ms issuing, %d calls, finished first %v)",
			st.SnapBPFResidentPages, st.SnapBPFPages, st.SnapBPFResidentMS, st.SnapBPFIssueMS,
			st.SnapBPFReadaheadCalls, *st.SnapBPFFinishedFirst)
	case restore.Cached:
		if inv.Process.MajorFaults > 2 {
			t.Errorf("cached took %d major faults", inv.Process.MajorFaults)
		}
	case restore.Premap:
		if st.PopulatedBytes != 256<<20 || st.StoreBytes != uint64(entry.Bytes) || st.PopulateMS <= 0 {
			t.Fatalf("premap stats %+v", st)
		}
		if inv.Process.MajorFaults > 2 {
			t.Errorf("premap took %d major faults", inv.Process.MajorFaults)
		}
	}
	t.Logf("%-8s setup %.1f ms, resume %.1f ms, total %.1f ms, faults %d major/%d minor, read %d KiB",
		k, inv.Timing.Restore.SetupMS, inv.Timing.Restore.ResumeMS, inv.Timing.TotalMS,
		inv.Process.MajorFaults, inv.Process.MinorFaults, inv.Process.ReadBytes>>10)
}

// checkVMMPool: the same strategies from the VMM pool. A restore that
// finds a VMM started ahead for its snapshot and strategy resumes on it,
// with the same answer and the strategy doing its part.
func (sf *strategyFixture) checkVMMPool(t *testing.T) {
	c, res, rp := sf.c, sf.res, sf.rp
	for _, k := range restore.Kinds() {
		miss := invokeAny(t, c, string(k))
		standby := waitStandby(t, c, res.Warm.ID, string(k))
		hit := invokeAny(t, c, string(k))
		r := hit.Timing.Restore
		if r.VMM != "pooled" || hit.VM != standby || r.VMMStartMS != 0 {
			t.Fatalf("%s: restore on %s (%s), the standby vm was %s", k, hit.VM, r.VMM, standby)
		}
		st := partStats(hit.StrategyStats)
		if hit.Strategy != string(k) || st.Fallback != "" {
			t.Fatalf("%s from the pool ran as %s (fallback %q)", k, hit.Strategy, st.Fallback)
		}
		switch k {
		case restore.REAP:
			if st.PrefetchPages != uint64(rp.FaultedPages) {
				t.Fatalf("pooled reap prefetched %d pages, recorded %d", st.PrefetchPages, rp.FaultedPages)
			}
		case restore.FaaSnap:
			if st.LayoutEntries == 0 {
				t.Fatalf("pooled faasnap stats %+v", st)
			}
		case restore.Premap:
			if st.PopulatedBytes != 256<<20 {
				t.Fatalf("pooled premap stats %+v", st)
			}
		}
		t.Logf("%-8s set-up %.1f ms on a pool miss (%s), %.1f ms on a hit; resume %.1f / %.1f ms",
			k, miss.Timing.Restore.SetupMS, miss.Timing.Restore.VMM, r.SetupMS, miss.Timing.Restore.ResumeMS, r.ResumeMS)
	}
}

// checkBurst: three faasnap invocations at once all answer.
func (sf *strategyFixture) checkBurst(t *testing.T) {
	c, ctx := sf.c, sf.ctx
	invs, _ := atOnce(3, func(int) (*client.Invocation, error) {
		return c.InvokeFunction(ctx, "probe", ev(`{"op":"hello"}`), client.InvokeOptions{Strategy: "faasnap"})
	})
	for i, inv := range invs {
		if inv == nil || !inv.OK || inv.Strategy != "faasnap" {
			t.Fatalf("burst invocation %d: %+v", i, inv)
		}
	}
}

// checkPremapUnstored: premap of a snapshot not in the memory store falls
// back, and is used again once the snapshot is stored again.
func (sf *strategyFixture) checkPremapUnstored(t *testing.T) {
	c, ctx, res := sf.c, sf.ctx, sf.res
	if err := c.UnstoreSnapshot(ctx, res.Warm.ID); err != nil {
		t.Fatal(err)
	}
	inv := invokeFresh(t, c, "premap")
	if inv.Strategy != "vanilla" || !strings.Contains(inv.StrategyStats.Fallback, "not in the memory store") {
		t.Fatalf("strategy %s, stats %+v", inv.Strategy, inv.StrategyStats)
	}
	if _, err := c.StoreSnapshot(ctx, "snap-000000000000"); err == nil {
		t.Fatal("stored a snapshot that does not exist")
	}
	if _, err := c.StoreSnapshot(ctx, res.Warm.ID); err != nil {
		t.Fatal(err)
	}
	if inv := invokeFresh(t, c, "premap"); inv.Strategy != "premap" {
		t.Fatalf("after storing again: %s (%s)", inv.Strategy, inv.StrategyStats.Fallback)
	}
}

// artifactDamage is a damage done to one strategy's artifact, and what the
// fallback must name.
type artifactDamage struct {
	strategy, file, how, contains string
}

// checkDamagedArtifacts: each damaged artifact makes the invocation fall
// back to vanilla and say so; repaired artifacts are used again.
func (sf *strategyFixture) checkDamagedArtifacts(t *testing.T) {
	c, res := sf.c, sf.res
	dir := res.Warm.Dir
	damage := []artifactDamage{
		{"faasnap", restore.FaaSnapManifest, "remove", "faasnap.json"},
		{"faasnap", restore.FaaSnapLoadingSet, "truncate", "loadingset.bin"},
		{"faasnap", restore.FaaSnapLoadingSet, "flip", "loadingset.bin"},
		{"faasnap", restore.FaaSnapManifest, "flip", "faasnap"},
		{"reap", restore.REAPManifest, "remove", "reap.json"},
		{"reap", restore.REAPWorkingSetFile, "truncate", "ws.bin"},
		{"reap", restore.REAPWorkingSetFile, "flip", "ws.bin"},
		{"reap", restore.REAPManifest, "flip", "reap"},
		{"snapbpf", restore.SnapBPFManifest, "remove", "snapbpf.json"},
		{"snapbpf", restore.SnapBPFManifest, "truncate", "snapbpf.json"},
		{"snapbpf", restore.SnapBPFManifest, "flip", "snapbpf"},
	}
	for _, d := range damage {
		t.Run(d.strategy+" "+d.how+" "+d.file, func(t *testing.T) { checkDamagedArtifact(t, c, dir, d) })
	}
	// Repaired artifacts are used again.
	for _, k := range []string{"faasnap", "snapbpf"} {
		inv := invokeFresh(t, c, k)
		if inv.Strategy != k {
			t.Fatalf("after repair: %s (%s)", inv.Strategy, inv.StrategyStats.Fallback)
		}
	}
}

// checkDamagedArtifact damages d's file under dir, checks the invocation
// falls back to vanilla naming it, and puts the file back.
func checkDamagedArtifact(t *testing.T, c *client.Client, dir string, d artifactDamage) {
	path := filepath.Join(dir, "strategies", d.strategy, d.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := os.WriteFile(path, orig, 0o600); err != nil {
			t.Fatal(err)
		}
	}()
	switch d.how {
	case "remove":
		err = os.Remove(path)
	case "truncate":
		err = os.Truncate(path, int64(len(orig))/2)
	case "flip":
		b := append([]byte(nil), orig...)
		b[len(b)/3] ^= 0x5a
		err = os.WriteFile(path, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
	inv := invokeFresh(t, c, d.strategy)
	if inv.Strategy != "vanilla" || inv.StrategyStats == nil ||
		!strings.Contains(inv.StrategyStats.Fallback, d.strategy) ||
		!strings.Contains(inv.StrategyStats.Fallback, "vanilla") {
		t.Fatalf("no fallback: strategy %s, stats %+v", inv.Strategy, inv.StrategyStats)
	}
	if !strings.Contains(inv.StrategyStats.Fallback, d.contains) {
		t.Errorf("fallback %q does not name %q", inv.StrategyStats.Fallback, d.contains)
	}
}

// waitStandby waits for a standby VM of the VMM pool for snapshot and
// strategy and returns its id.
func waitStandby(t *testing.T, c *client.Client, snapshot, strategy string) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		vms, err := c.ListVMs(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.State == "standby" && v.Snapshot == snapshot && v.Strategy == strategy {
				return v.ID
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("no standby vm for %s (%s)", snapshot, strategy)
	return ""
}

func invokeAny(t *testing.T, c *client.Client, strategy string) *client.Invocation {
	t.Helper()
	return invokeWith(t, c, client.InvokeOptions{Strategy: strategy})
}

// invokeFresh restores from storage: the snapshot's files evicted first,
// so no VMM of the pool, begun before the test changed them, serves it.
func invokeFresh(t *testing.T, c *client.Client, strategy string) *client.Invocation {
	t.Helper()
	return invokeWith(t, c, client.InvokeOptions{Strategy: strategy, EvictCache: true})
}

func invokeWith(t *testing.T, c *client.Client, o client.InvokeOptions) *client.Invocation {
	t.Helper()
	inv, err := c.InvokeFunction(context.Background(), "probe", ev(`{"op":"hello","name":"x"}`), o)
	if err != nil {
		t.Fatal(err)
	}
	if !inv.OK || !strings.Contains(string(inv.Result), "hello, x!") {
		t.Fatalf("%+v %s", inv.Error, inv.Result)
	}
	return inv
}

// TestPrepareWithoutSnapBPFCapture: on a host that cannot capture (here: the
// capture program is missing), prepare still builds every other strategy's
// artifacts, says why snapbpf was not prepared, and snapbpf restores run as
// vanilla and say so.
func TestPrepareWithoutSnapBPFCapture(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.SnapBPFObject = "/nonexistent/snapbpf_capture.bpf.o" })
	c := e.c
	res := prepareProbe(t, c)
	if builds(res).SnapBPF != nil || !strings.Contains(builds(res).SnapBPFUnavailable, "snapbpf_capture.bpf.o") {
		t.Fatalf("snapbpf %+v, unavailable %q", builds(res).SnapBPF, builds(res).SnapBPFUnavailable)
	}
	if inv := invokeFresh(t, c, "faasnap"); inv.Strategy != "faasnap" {
		t.Fatalf("faasnap ran as %s (%s)", inv.Strategy, inv.StrategyStats.Fallback)
	}
	inv := invokeFresh(t, c, "snapbpf")
	if inv.Strategy != "vanilla" || !strings.Contains(inv.StrategyStats.Fallback, "snapbpf") {
		t.Fatalf("snapbpf without a capture: strategy %s, stats %+v", inv.Strategy, inv.StrategyStats)
	}
}
