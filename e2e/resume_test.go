package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// TestResumeBreakdown measures where a cold start's resume goes (docs/
// bench/resume.md, "Where resume goes"): hello at 512 MiB restored
// THAW_RESUME_N times (default 10) under the cached strategy, the VMM pool
// off so no background start competes for the CPUs. Per restore it keeps
// the host's split (cont answered, restore request written to its answer
// read) and the guest's steps; then, in one clone kept running, the same
// restore handling run again on translated code, and pause/resume of that
// VM (cont and a clock request, no new VMM, no vmgenid notification). With
// THAW_RESUME_OUT set it writes the samples there as JSON lines.
func TestResumeBreakdown(t *testing.T) {
	parallel(t)
	n := 10
	n = envNumber("THAW_RESUME_N", n)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.VMMPool = -1 })
	ctx := ctxT(t)
	snap := helloSnapshot(t, e.c, 512)
	var out *os.File
	if dir := os.Getenv("THAW_RESUME_OUT"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if out, err = os.Create(filepath.Join(dir, "resume.jsonl")); err != nil {
			t.Fatal(err)
		}
		defer out.Close()
	}
	record := func(kind string, v any) {
		if out == nil {
			return
		}
		b, _ := json.Marshal(map[string]any{"kind": kind, "sample": v})
		_, _ = out.Write(append(b, '\n'))
	}
	cols := map[string][]float64{}
	add := func(k string, v float64) { cols[k] = append(cols[k], v) }
	for i := range n {
		inv, err := e.c.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"bench"}`), client.InvokeOptions{Strategy: "cached"})
		if err != nil || !inv.OK {
			t.Fatalf("cold start %d: %v %+v", i, err, inv)
		}
		r := inv.Timing.Restore
		record("cold", inv.Timing)
		add("setup_ms", r.SetupMS)
		add("cont_ms", r.ContMS)
		add("resume_ms", r.ResumeMS)
		add("agent_wait_ms", r.AgentWaitMS)
		add("host_share_ms", r.ResumeMS-r.AgentWaitMS)
		add("agent_restore_ms", r.AgentRestoreMS)
		for k, v := range r.AgentSteps {
			add("guest."+k, v)
		}
		add("outside_agent_ms", r.AgentWaitMS-r.AgentSteps["total"]-r.AgentSteps["read"])
	}

	clone := warmRestoreSteps(t, ctx, e, record, add)
	// Pause and resume the running clone: cont and a clock request on a
	// VMM that has run this guest (translated code, no vmgenid change).
	for range n {
		if _, err := e.c.PauseVM(ctx, clone.ID); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		if _, err := e.c.ResumeVM(ctx, clone.ID); err != nil {
			t.Fatal(err)
		}
		d := float64(time.Since(t0).Microseconds()) / 1000
		record("pause_resume", map[string]float64{"resume_call_ms": d})
		add("warm.pause_resume_call_ms", d)
	}
	b := resumeSummary(cols)
	t.Logf("resume breakdown, hello 512 MiB, cached:\n%s", b.String())
	if out != nil {
		if err := os.WriteFile(filepath.Join(filepath.Dir(out.Name()), "summary.txt"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// warmRestoreSteps keeps one clone running and runs the restore handling
// again in it, on warm code, recording the steps; it returns the clone.
func warmRestoreSteps(t *testing.T, ctx context.Context, e *env, record func(string, any), add func(string, float64)) *client.VM {
	t.Helper()
	if _, err := e.c.CreateFunctionFromDir(ctx, "resumeprobe", repoPath("e2e/testdata/resumeprobe"), 512, 1); err != nil {
		t.Fatal(err)
	}
	pv, psnap := snapshotBoot(t, e.c, "resumeprobe")
	_ = e.c.DeleteVM(ctx, pv.ID)
	clone, err := e.c.RestoreVM(ctx, psnap.ID, "cached")
	if err != nil {
		t.Fatal(err)
	}
	inv, err := e.c.InvokeVM(ctx, clone.ID, ev(`{"reps":5}`), client.InvokeOptions{})
	if err != nil || !inv.OK {
		t.Fatalf("warm restore handling: %v %+v", err, inv)
	}
	var warm []map[string]float64
	if err := json.Unmarshal(inv.Result, &warm); err != nil {
		t.Fatal(err)
	}
	for _, s := range warm {
		record("warm_restore_steps", s)
		add("warm.total", s["total"])
	}
	return clone
}

// resumeSummary is a line per column: median, p10 and p90.
func resumeSummary(cols map[string][]float64) *strings.Builder {
	keys := make([]string, 0, len(cols))
	for k := range cols {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		v := append([]float64(nil), cols[k]...)
		sort.Float64s(v)
		fmt.Fprintf(&b, "%-28s median %7.2f  p10 %7.2f  p90 %7.2f  (n=%d)\n", k, pct(v, .5), pct(v, .1), pct(v, .9), len(v))
	}
	return &b
}

// pct is the p-quantile of sorted v, interpolated.
func pct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	i := float64(len(v)-1) * p
	lo := int(i)
	hi := min(lo+1, len(v)-1)
	return v[lo] + (v[hi]-v[lo])*(i-float64(lo))
}
