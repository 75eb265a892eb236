package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// The bundled hello, request to answer, in one run and one daemon: a ready
// clone's hit, a cold restore (naming the snapshot bypasses the ready
// clones), keep-alive reuse and a warm call, N of each, sequential
// (concurrency 1). A measurement: it prints, asserts nothing about
// latency (the machine is shared). THAW_READY_N sets N (default 15).
func TestReadyClonesMeasure(t *testing.T) {
	n := 15
	if v := os.Getenv("THAW_READY_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.Ready = daemon.ReadyConfig{MemoryMiB: 1024}
	})
	ctx := ctxT(t)
	if _, err := e.c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), 0, 0); err != nil {
		t.Fatal(err)
	}
	vm, snap := snapshotBoot(t, e.c, "hello")
	invoke := func(what string, call func() (*client.Invocation, error)) *client.Invocation {
		t.Helper()
		inv, err := call()
		if err != nil || !inv.OK {
			t.Fatalf("%s: %v %+v", what, err, inv)
		}
		return inv
	}
	var hit, renew, cold, kept, warm []float64
	byName := func() (*client.Invocation, error) {
		return e.c.InvokeFunction(ctx, "hello", ev(`{"name":"bench"}`), client.InvokeOptions{})
	}
	invoke("first", byName) // a miss: its traffic makes the daemon keep a clone
	for range n {
		waitReadyClone(t, ctx, e.c)
		time.Sleep(200 * time.Millisecond) // let the refill's VMM settle, as between requests that arrive apart
		inv := invoke("hit", byName)
		if inv.Mode != "ready" {
			t.Fatalf("mode %s with a ready clone waiting", inv.Mode)
		}
		hit = append(hit, inv.Timing.TotalMS)
		renew = append(renew, inv.Timing.Ready.RenewMS)
	}
	for range n {
		inv := invoke("cold", func() (*client.Invocation, error) {
			return e.c.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		cold = append(cold, inv.Timing.TotalMS)
	}
	for range n {
		inv := invoke("warm", func() (*client.Invocation, error) {
			return e.c.InvokeVM(ctx, vm.ID, ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		warm = append(warm, inv.Timing.TotalMS)
	}
	// Keep-alive reuse: the VMs kept after the hits serve when no ready
	// clone is waiting; delete the ready ones and invoke at once.
	for range n {
		vms, err := e.c.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.State == "ready" {
				e.c.DeleteVM(ctx, v.ID)
			}
		}
		inv := invoke("kept", byName)
		if inv.Mode == "pooled" {
			kept = append(kept, inv.Timing.TotalMS)
		}
	}
	t.Logf("hello, request to answer, p50 ms (n): ready hit %.2f (%d; renewal %.2f), cold restore %.2f (%d), keep-alive %.2f (%d), warm %.2f (%d)",
		median(hit), len(hit), median(renew), median(cold), len(cold), median(kept), len(kept), median(warm), len(warm))
	t.Logf("ready hits %v", hit)
	t.Logf("cold %v", cold)
	t.Logf("keep-alive %v", kept)
	t.Logf("warm %v", warm)
}
