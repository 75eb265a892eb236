package e2e

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// Ready hits of hello side by side in one run, on two daemons that differ
// only in the refill's settle time: none (a refill starts as soon as the
// hit's invocation ends, while its answer is still being written) and the
// default. The hits alternate, each with both daemons' clones ready and
// settled. A measurement: it prints the request-to-answer time the client
// sees and the parts the daemon reports. THAW_READY_N hits each (default 15).
func TestReadyClonesMeasureSettle(t *testing.T) {
	measuring(t)
	n := 15
	if v := os.Getenv("THAW_READY_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	type arm struct {
		name  string
		e     *env
		parts hitParts
	}
	ctx := ctxT(t)
	var arms []*arm
	for _, a := range []struct {
		name   string
		settle time.Duration
	}{{"settle none", -1}, {"settle default", 0}} {
		e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
			c.Ready = daemon.ReadyConfig{MemoryMiB: 1024, Settle: a.settle}
		})
		if _, err := e.c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), 0, 0); err != nil {
			t.Fatal(err)
		}
		vm, _ := snapshotBoot(t, e.c, "hello")
		if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
			t.Fatal(err)
		}
		arms = append(arms, &arm{name: a.name, e: e, parts: hitParts{}})
	}
	call := func(c *client.Client) (*client.Invocation, time.Duration) {
		t.Helper()
		sent := time.Now()
		inv, err := c.InvokeFunction(ctx, "hello", ev(`{"name":"bench"}`), client.InvokeOptions{})
		if err != nil || !inv.OK {
			t.Fatalf("invoke: %v %+v", err, inv)
		}
		return inv, time.Since(sent)
	}
	for _, a := range arms {
		call(a.e.c) // a miss: its traffic makes the daemon keep a clone
	}
	for range n {
		for _, a := range arms {
			for _, b := range arms {
				waitReadyClone(t, ctx, b.e.c)
			}
			time.Sleep(300 * time.Millisecond)
			inv, took := call(a.e.c)
			if inv.Mode != "ready" {
				t.Fatalf("%s: mode %s with a ready clone waiting", a.name, inv.Mode)
			}
			a.parts.add(inv, took)
		}
	}
	for _, a := range arms {
		t.Logf("%s:", a.name)
		a.parts.log(t)
	}
}
