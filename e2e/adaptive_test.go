package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// TestAdaptiveRestore on real VMs: a new function restores with auto (the
// rule's strategy at first, the evidence shown in its document, the set's
// use measured against what the guest touched); then, its strategy fixed
// to reap and its refresh from traffic, an input the prepare never saw
// makes REAP's working set drift, thaw records it again in the background
// from that invocation and swaps it in, and the faults outside the set
// fall back under the threshold.
func TestAdaptiveRestore(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.KeepAlive, c.VMMPool = -1, -1 // every invocation a cold start, VMMs started for it
		c.Adaptive = daemon.AdaptiveConfig{DefaultStrategy: wire.StrategyAuto, DefaultRefresh: wire.RefreshPrepare, PrepareAfter: -1}
	})
	c, ctx := e.c, ctxT(t)
	small, large := ev(`{"size":64,"seed":1}`), ev(`{"size":512,"seed":2}`)
	if _, err := c.CreateFunctionFromDir(ctx, "image", repoPath("functions/image"), 256, 1, client.WithRefresh(wire.RefreshTraffic)); err != nil {
		t.Fatal(err)
	}
	res, err := c.Prepare(ctx, "image", small, client.PrepareOptions{})
	if err != nil {
		t.Fatalf("prepare: %v", err)
	}
	checkAutoFirstColdStart(t, c, ctx, res, small)
	reap := "reap"
	if _, err := c.SetFunctionRestore(ctx, "image", client.RestoreSettings{Strategy: &reap}); err != nil {
		t.Fatal(err)
	}
	before, refresh := driftUntilRefresh(t, c, ctx, large)
	checkTrafficRefresh(t, c, ctx, large, before, refresh)
	checkAskedRefresh(t, c, ctx, large)
}

// checkAutoFirstColdStart: the first cold start restores with auto (the
// rule's strategy), the evidence shown in the function's document.
func checkAutoFirstColdStart(t *testing.T, c *client.Client, ctx context.Context, res *client.PrepareResult, small json.RawMessage) {
	t.Helper()
	inv, err := c.InvokeFunction(ctx, "image", small, client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("first cold start: %v %+v", err, inv)
	}
	st := partStats(inv.StrategyStats)
	if inv.Snapshot != res.Warm.ID || inv.Strategy != "faasnap" || inv.StrategyChoice == nil || inv.StrategyChoice.How != "rule" ||
		st == nil || st.SetPages == 0 || st.SetTouchedPages == 0 {
		t.Fatalf("first cold start: %s %s %+v %+v", inv.Snapshot, inv.Strategy, inv.StrategyChoice, st)
	}
	t.Logf("auto: %s (%s), total %.0f ms; loading set %d pages, %d touched, %d outside", inv.Strategy, inv.StrategyChoice.Reason,
		inv.Timing.TotalMS, st.SetPages, st.SetTouchedPages, st.SetOutsidePages)
	fn, err := c.GetFunction(ctx, "image")
	if err != nil {
		t.Fatal(err)
	}
	r := fn.Restore
	if r == nil || r.Strategy != "auto" || r.StrategyFrom != "daemon" || r.Refresh != "traffic" || r.RefreshFrom != "function" ||
		len(r.Versions) != 1 || len(r.Versions[0].Locations) != 1 {
		t.Fatalf("restore document %+v", r)
	}
	if l := r.Versions[0].Locations[0]; l.Choice != "faasnap" || l.Snapshot != res.Warm.ID || l.ColdStarts != 1 ||
		len(l.Evidence) != 1 || l.Evidence[0].Samples != 1 || l.Evidence[0].MedianTotalMS <= 0 {
		t.Fatalf("local location %+v", l)
	}
}

// driftUntilRefresh cold-starts reap with the larger input until a refresh
// from traffic is recorded (at most 10 times), and returns the outside
// ratios seen and the refresh.
func driftUntilRefresh(t *testing.T, c *client.Client, ctx context.Context, large json.RawMessage) ([]float64, *client.WorkingSetRefresh) {
	t.Helper()
	var fn *client.Function
	var refresh *client.WorkingSetRefresh
	var before []float64
	for i := 1; i <= 10 && refresh == nil; i++ {
		inv, err := c.InvokeFunction(ctx, "image", large, client.InvokeOptions{})
		if err != nil || !inv.OK || inv.Strategy != "reap" || inv.StrategyChoice.How != "function" {
			t.Fatalf("cold start %d with the larger input: %v %+v", i, err, inv)
		}
		before = append(before, inv.StrategyStats.SetOutsideRatio)
		if fn, err = c.GetFunction(ctx, "image"); err != nil {
			t.Fatal(err)
		}
		if rs := fn.Restore.Versions[0].Refreshes; len(rs) > 0 {
			refresh = &rs[0]
		}
	}
	t.Logf("reap with the larger input, outside the working set: %v", before)
	if refresh == nil {
		t.Fatalf("no refresh within 10 cold starts (outside ratios %v)", before)
	}
	return before, refresh
}

// checkTrafficRefresh waits for the refresh from traffic and checks the
// refreshed set keeps the faults outside it under the threshold.
func checkTrafficRefresh(t *testing.T, c *client.Client, ctx context.Context, large json.RawMessage, before []float64, refresh *client.WorkingSetRefresh) {
	t.Helper()
	op, err := c.WaitOperation(ctx, refresh.Operation, nil)
	if err != nil || op.Kind != wire.OpRefresh || op.Result == nil || op.Result.Refresh == nil {
		t.Fatalf("refresh operation: %v %+v", err, op)
	}
	done := op.Result.Refresh
	if done.State != wire.OpSucceeded || done.Source != "traffic" || len(done.Sets) != 1 || done.Sets[0].Strategy != "reap" ||
		done.Sets[0].PagesAfter <= done.Sets[0].PagesBefore {
		t.Fatalf("refresh %+v", done)
	}
	t.Logf("refresh %s: %s; %d -> %d pages", done.Operation, done.Reason, done.Sets[0].PagesBefore, done.Sets[0].PagesAfter)
	start := time.Now()
	inv, err := c.InvokeFunction(ctx, "image", large, client.InvokeOptions{})
	if err != nil || !inv.OK || inv.Strategy != "reap" || inv.StrategyStats.Fallback != "" {
		t.Fatalf("after the refresh: %v %+v", err, inv)
	}
	if got := inv.StrategyStats.SetOutsideRatio; got >= 0.2 || got >= before[len(before)-1] {
		t.Fatalf("outside the refreshed set: %.3f (before %v)", got, before)
	}
	t.Logf("after the refresh: %.3f of touched pages outside the set, total %.0f ms (%s)", inv.StrategyStats.SetOutsideRatio,
		inv.Timing.TotalMS, time.Since(start).Round(time.Millisecond))
}

// checkAskedRefresh: FaaSnap's loading set and SnapBPF's prefetch set
// recorded again with the larger input on request, swapped in, and
// restored whole.
func checkAskedRefresh(t *testing.T, c *client.Client, ctx context.Context, large json.RawMessage) {
	t.Helper()
	asked, err := c.RefreshWorkingSets(ctx, "image", large, "faasnap", "snapbpf")
	if err != nil || asked.State != wire.OpSucceeded || asked.Source != "request" || len(asked.Sets) != 2 {
		t.Fatalf("asked refresh: %v %+v", err, asked)
	}
	for _, set := range asked.Sets {
		t.Logf("%s: %d -> %d pages", set.Strategy, set.PagesBefore, set.PagesAfter)
		inv, err := c.InvokeFunction(ctx, "image", large, client.InvokeOptions{Strategy: set.Strategy, EvictCache: true})
		if err != nil || !inv.OK || inv.Strategy != set.Strategy || inv.StrategyStats.Fallback != "" || inv.StrategyStats.SetPages == 0 {
			t.Fatalf("%s after its refresh: %v %+v", set.Strategy, err, inv)
		}
		if set.PagesAfter == 0 || set.PagesAfter == set.PagesBefore && set.BytesAfter == set.BytesBefore && set.Strategy == "faasnap" {
			t.Errorf("%s: the set did not change with the larger input: %+v", set.Strategy, set)
		}
	}
}
