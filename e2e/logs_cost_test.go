package e2e

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// What output capture costs a warm invocation, and that the host serves an
// agent without it: hello's warm invocations on a VM of THAW_IMAGE (an
// agent that captures) and of THAW_LOGS_BASE_IMAGE (one from before),
// interleaved so that both see the same load, medians and 90th
// percentiles of the host's request-to-reply time and the guest's handler
// time. The older agent's invocations say their logs are missing. Runs
// only when THAW_LOGS_BASE_IMAGE is set.
func TestLogsWarmCost(t *testing.T) {
	base := os.Getenv("THAW_LOGS_BASE_IMAGE")
	if base == "" {
		t.Skip("THAW_LOGS_BASE_IMAGE is not set: the image to compare with (one whose agent does not capture output)")
	}
	images := []struct {
		name, dir string
		vm        string
		c         *client.Client
	}{{name: "capture", dir: imageDir(t)}, {name: "before", dir: base}}
	ctx := ctxT(t)
	for i := range images {
		im := &images[i]
		e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.ImageDir, c.DefaultMemoryMiB = im.dir, 192 })
		if _, err := e.c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), 0, 0); err != nil {
			t.Fatal(err)
		}
		vm, err := e.c.BootVM(ctx, "hello")
		if err != nil {
			t.Fatal(err)
		}
		im.vm, im.c = vm.ID, e.c
	}
	const rounds = 200
	invokeMS := make([][]float64, len(images))
	guestMS := make([][]float64, len(images))
	for r := range rounds + 10 {
		for i, im := range images {
			inv, err := im.c.InvokeVM(ctx, im.vm, json.RawMessage(`{"name":"you"}`), client.InvokeOptions{Logs: true})
			if err != nil || !inv.OK || inv.Logs == nil {
				t.Fatalf("%s: %v %+v", im.name, err, inv)
			}
			if missing := inv.Logs.Missing != ""; missing != (im.name == "before") {
				t.Fatalf("%s: logs %+v", im.name, inv.Logs)
			}
			if r >= 10 { // the first ones warm caches up
				invokeMS[i] = append(invokeMS[i], inv.Timing.InvokeMS)
				guestMS[i] = append(guestMS[i], inv.Timing.GuestMS)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, im := range images {
		t.Logf("%-8s invoke (host) median %.2f ms p90 %.2f ms; handler (guest) median %.3f ms; %d warm invocations",
			im.name, quantile(invokeMS[i], 0.5), quantile(invokeMS[i], 0.9), quantile(guestMS[i], 0.5), rounds)
	}
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
