package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

// TestMeasureDeploy is a measurement, not a test: it only runs with
// THAW_DEPLOY_MEASURE=1 and reports (docs/bench/deploy.md); it fails
// only if something does not work. A function with two wheels (igraph, a C
// extension, and texttable, pure Python) from a real index, its wheels and
// layer cached by a first deploy, is then brought up THAW_DEPLOY_MEASURE_REPS
// times (default 5) each way, alternating: by hand (function create, vm
// boot, snapshot create, vm delete) and by `deploy` of a new version. It
// reports both totals, their difference, the deploy's own steps, and the
// rollback's time. THAW_DEPLOY_MEASURE_OUT, if set, is a file the samples
// are written to as JSON lines.
func TestMeasureDeploy(t *testing.T) {
	if os.Getenv("THAW_DEPLOY_MEASURE") != "1" {
		t.Skip("a measurement: set THAW_DEPLOY_MEASURE=1 (and THAW_IMAGE)")
	}
	reps := envNumber("THAW_DEPLOY_MEASURE_REPS", 5)
	ix := pypitest.Serve(t, "igraph-1.0.0", "texttable-1.7.2")
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.Deps.IndexURL = ix.URL })
	ctx := ctxT(t)
	reqs := "igraph==1.0.0\ntexttable==1.7.2\n"
	src := graphSource(t, reqs)
	// Warm the wheel cache and the layer.
	first, err := e.c.DeployFromDir(ctx, "graph", src(0), client.DeployRequest{MemoryMiB: 256})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first deploy (resolves, downloads, builds the layer): %+v", first.Timing)
	var out *os.File
	if p := os.Getenv("THAW_DEPLOY_MEASURE_OUT"); p != "" {
		if out, err = os.Create(p); err != nil {
			t.Fatal(err)
		}
		defer out.Close()
	}
	record := func(kind string, i int, v any) {
		if out != nil {
			b, _ := json.Marshal(map[string]any{"kind": kind, "rep": i, "sample": v})
			fmt.Fprintf(out, "%s\n", b)
		}
	}
	var byHand, deploys, builds, rollbacks []float64
	for i := 1; i <= reps; i++ {
		hand, vm := bringUpByHand(t, ctx, e, i, src)
		byHand = append(byHand, hand)
		record("by_hand", i, map[string]float64{"total_ms": hand, "boot_ms": vm.BootMS})

		t0 := time.Now()
		d, err := e.c.DeployFromDir(ctx, "graph", src(i), client.DeployRequest{})
		if err != nil || d.Unchanged {
			t.Fatalf("deploy %d: %v %+v", i, err, d)
		}
		dt := float64(time.Since(t0).Microseconds()) / 1000
		deploys = append(deploys, dt)
		builds = append(builds, d.Timing.BuildMS)
		record("deploy", i, map[string]any{"total_ms": dt, "timing": d.Timing})

		r, err := e.c.RollbackFunction(ctx, "graph", 0)
		if err != nil {
			t.Fatal(err)
		}
		rollbacks = append(rollbacks, r.MS)
		record("rollback", i, r)
		if _, err := e.c.RollbackFunction(ctx, "graph", d.Version); err != nil { // back to the newest
			t.Fatal(err)
		}
		t.Logf("rep %d: by hand %.0f ms (boot %.0f), deploy %.0f ms (build %.0f, boot %.0f, snapshot %.0f), rollback %.1f ms",
			i, hand, vm.BootMS, dt, d.Timing.BuildMS, d.Timing.BootMS, d.Timing.SnapshotMS, r.MS)
	}
	med := func(x []float64) float64 {
		s := append([]float64(nil), x...)
		sort.Float64s(s)
		return s[len(s)/2]
	}
	t.Logf("medians over %d: by hand %.0f ms, deploy %.0f ms (difference %+.0f ms; the deploy's build %.0f ms), rollback %.1f ms",
		reps, med(byHand), med(deploys), med(deploys)-med(byHand), med(builds), med(rollbacks))
}

// graphSource returns a function writing revision i of the measured
// function's source to a new directory.
func graphSource(t *testing.T, reqs string) func(int) string {
	return func(i int) string {
		dir := filepath.Join(t.TempDir(), "pr")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		code := fmt.Sprintf("import igraph\nimport texttable\n\nREV = %d\n\n\ndef handle(event):\n    g = igraph.Graph.Tree(31, 2)\n    return {\"rev\": REV, \"vertices\": g.vcount()}\n", i)
		for name, body := range map[string]string{"handler.py": code, "requirements.txt": reqs} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
}

// bringUpByHand brings up revision 100+i of the function by hand (function
// create, vm boot, snapshot create, vm delete) and returns the total in ms
// and the VM booted.
func bringUpByHand(t *testing.T, ctx context.Context, e *env, i int, src func(int) string) (float64, *client.VM) {
	t.Helper()
	t0 := time.Now()
	name := fmt.Sprintf("byhand%d", i)
	if _, err := e.c.CreateFunctionFromDir(ctx, name, src(100+i), 256, 1); err != nil {
		t.Fatal(err)
	}
	vm, err := e.c.BootVM(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.c.CreateSnapshot(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	hand := float64(time.Since(t0).Microseconds()) / 1000
	return hand, vm
}
