package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// waitReadyClone waits until c has a ready clone.
func waitReadyClone(t *testing.T, ctx context.Context, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		vms, err := c.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.State == "ready" {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no ready clone within 2 minutes")
}

// Ready clones on real VMs: every request gets a clone that served none.
// Request 1 writes a marker file and a global; no later request sees
// either, and 16 hits draw 16 different urandom, OpenSSL and uuid values.
// A hit's latency is printed beside a cold restore's (not asserted: the
// machine is shared).
func TestReadyClonesFresh(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.KeepAlive = -1
		c.Ready = daemon.ReadyConfig{MemoryMiB: 1024}
	})
	ctx := ctxT(t)
	boot, snap := bootSnapshot(t, e.c, "fresh", "e2e/testdata/fresh")
	if err := e.c.DeleteVM(ctx, boot.ID); err != nil {
		t.Fatal(err)
	}
	invoke := func(what string) (*client.Invocation, freshValues) { return invokeFreshClone(t, ctx, e, what) }
	first, _ := invoke("request 1")
	if first.Mode != "cold" || first.Timing.Ready == nil || first.Timing.Ready.Fallback != "none ready" {
		t.Fatalf("request 1: mode %s, ready %+v", first.Mode, first.Timing.Ready)
	}
	seen := seenValues{}
	const hits = 16
	var hitMS, renewMS []float64
	for i := range hits {
		waitReadyClone(t, ctx, e.c)
		inv, v := invoke("a later request")
		if inv.Mode != "ready" || inv.Timing.Ready == nil || !inv.Timing.Ready.Hit {
			t.Fatalf("hit %d: mode %s, ready %+v", i, inv.Mode, inv.Timing.Ready)
		}
		seen.note("os.urandom", v.URandom)
		seen.note("uuid4", v.UUID4)
		seen.note("ssl.RAND_bytes", v.SSLRand)
		hitMS = append(hitMS, inv.Timing.TotalMS)
		renewMS = append(renewMS, inv.Timing.Ready.RenewMS)
	}
	checkDistinct(t, seen, hits)
	// Cold restores of the same snapshot, in the same run (naming the
	// snapshot bypasses the ready clones).
	coldMS := coldRestoresMS(t, ctx, e, snap)
	t.Logf("request to answer, ms: ready hit p50 %.1f (renewal p50 %.1f) over %d; cold restore p50 %.1f over %d",
		median(hitMS), median(renewMS), len(hitMS), median(coldMS), len(coldMS))
	t.Logf("ready hits: %v", hitMS)
	t.Logf("cold restores: %v", coldMS)
	stopCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.c.DeleteFunctionWith(stopCtx, "fresh", client.DeleteFunctionOptions{Cascade: true}); err != nil {
		t.Fatalf("delete the function with its ready clones: %v", err)
	}
	vms, err := e.c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State == "ready" || v.State == "running" || v.State == "booting" {
			t.Fatalf("vm %s is %s after its function was deleted", v.ID, v.State)
		}
	}
}

// freshValues are what the fresh function reports: whether it saw the
// marker, how many requests its process served, and three random values.
type freshValues struct {
	Marker  bool   `json:"marker"`
	Served  int    `json:"served"`
	URandom string `json:"urandom"`
	UUID4   string `json:"uuid4"`
	SSLRand string `json:"ssl_rand"`
}

// invokeFreshClone invokes the fresh function and checks it saw no earlier
// request's state.
func invokeFreshClone(t *testing.T, ctx context.Context, e *env, what string) (*client.Invocation, freshValues) {
	t.Helper()
	inv, err := e.c.InvokeFunction(ctx, "fresh", ev(`{}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("%s: %v %+v", what, err, inv)
	}
	var v freshValues
	if err := json.Unmarshal(inv.Result, &v); err != nil {
		t.Fatal(err)
	}
	if v.Marker || v.Served != 0 {
		t.Fatalf("%s (%s on %s) saw an earlier request's state: marker %v, served %d", what, inv.Mode, inv.VM, v.Marker, v.Served)
	}
	return inv, v
}

// coldRestoresMS restores snap cold 5 times and returns the request times.
func coldRestoresMS(t *testing.T, ctx context.Context, e *env, snap *client.Snapshot) []float64 {
	t.Helper()
	var coldMS []float64
	for range 5 {
		inv, err := e.c.InvokeSnapshot(ctx, snap.ID, ev(`{}`), client.InvokeOptions{})
		if err != nil || !inv.OK || inv.Mode != "cold" {
			t.Fatalf("cold: %v %+v", err, inv)
		}
		coldMS = append(coldMS, inv.Timing.TotalMS)
	}
	return coldMS
}
