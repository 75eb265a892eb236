package e2e

import (
	"sort"
	"testing"

	"github.com/thaw-dev/thaw/client"
)

// With keep-alive (the daemon's default), 20 sequential invocations of a
// function run on one kept VM: the first restores it, the rest run on it
// (mode pooled) with no restore of their own. How fast that is against a
// warm VM is measured by thaw bench fresh (keep-alive and warm columns);
// the p50s here are logged, not asserted, since a loaded CI host makes any
// bound on them flaky.
func TestKeepAliveServesWarm(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	median := func(d []float64) float64 {
		sort.Float64s(d)
		return d[len(d)/2]
	}
	var pooled, warm []float64
	var vm string
	for i := range 20 {
		inv, err := c.InvokeFunction(ctx, "probe", ev(`{"op":"hello"}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("invocation %d: %v %+v", i, err, inv)
		}
		switch {
		case i == 0 && inv.Mode != "cold" && inv.Mode != "pooled":
			t.Fatalf("first invocation mode %s", inv.Mode)
		case i > 0 && (inv.Mode != "pooled" || (vm != "" && inv.VM != vm)):
			t.Fatalf("invocation %d: mode %s on %s, want pooled on %s", i, inv.Mode, inv.VM, vm)
		}
		vm = inv.VM
		if i > 0 && inv.Timing.Restore != nil {
			t.Fatalf("invocation %d: pooled but restored (%+v)", i, inv.Timing.Restore)
		}
		if i > 0 {
			pooled = append(pooled, inv.Timing.TotalMS)
		}
	}
	for i := range 20 {
		inv, err := c.InvokeVM(ctx, f.vm.ID, ev(`{"op":"hello"}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("warm invocation %d: %v", i, err)
		}
		warm = append(warm, inv.Timing.TotalMS)
	}
	p, w := median(pooled), median(warm)
	t.Logf("p50 over 19 pooled invocations %.2f ms, over 20 warm ones %.2f ms", p, w)
	// The kept VM is a running VM of the function, and it is stopped when
	// its keep-alive time is over (60 s by default; not waited for here).
	if v, err := c.GetVM(ctx, vm); err != nil || v.State != "running" {
		t.Fatalf("kept vm: %+v %v", v, err)
	}
}
