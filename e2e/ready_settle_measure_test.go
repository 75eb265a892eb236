package e2e

import (
	"os"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// Ready hits of hello side by side in one run, on daemons (real thawd
// processes) that differ in one thing: THAW_READY_BEFORE names an earlier
// thawd binary to run beside this tree's (before and after a change), and
// THAW_READY_BEFORE_IMAGE, if set, the guest image it runs; without it, this tree's thawd with and without the refill's settle time.
// The hits alternate, each with every daemon's clones ready and settled. A
// measurement: it prints the request-to-answer time the client sees and the
// parts the daemon reports. THAW_READY_N hits each (default 15).
func TestReadyClonesMeasureSideBySide(t *testing.T) {
	measuring(t)
	n := 15
	n = envNumber("THAW_READY_N", n)
	type arm struct {
		name, bin string
		args      []string
		c         *client.Client
		parts     hitParts
	}
	arms := []*arm{{name: "settle none", bin: repoPath("bin/thawd"), args: []string{"--ready-settle", "-1s"}},
		{name: "this tree", bin: repoPath("bin/thawd")}}
	if before := os.Getenv("THAW_READY_BEFORE"); before != "" {
		arms[0] = &arm{name: "before (" + before + ")", bin: before}
		if image := os.Getenv("THAW_READY_BEFORE_IMAGE"); image != "" { // its own guest image (an older agent)
			arms[0].args = []string{"--image", image}
		}
	}
	ctx := ctxT(t)
	for _, a := range arms {
		d, err := startThawdBinary(t, a.bin, t.TempDir(), append([]string{"--standby-memory", "1024"}, a.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		a.c, a.parts = client.New("unix:"+d.sock), hitParts{}
		onlySnapshot(t, ctx, a.c, "hello")
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
		call(a.c) // a miss: its traffic makes the daemon keep a clone
	}
	for range n {
		for _, a := range arms {
			for _, b := range arms {
				waitReadyClone(t, ctx, b.c)
			}
			time.Sleep(300 * time.Millisecond)
			inv, took := call(a.c)
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
