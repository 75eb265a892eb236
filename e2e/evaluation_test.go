package e2e

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/eval"
	"github.com/thaw-dev/thaw/internal/bench/inputs"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/restore"
)

// TestSmokeEvaluation keeps the evaluation harness working: hello and json
// with their Table 2 inputs in a real Redis server on loopback (record A,
// test B), every strategy, one repetition, cold (cache evicted), through
// the real daemon and VMs. It checks that every cell was measured, not how
// fast anything was.
func TestSmokeEvaluation(t *testing.T) {
	parallel(t)
	e, ctx, r := startEvalEnv(t)
	fns := []string{"hello", "json"}
	if _, err := inputs.Load(ctx, r, fns, nil, nil); err != nil {
		t.Fatal(err)
	}
	cases, err := bench.RedisCases(r, repoPath("."), fns, "A", "B")
	if err != nil {
		t.Fatal(err)
	}
	var strategies []string
	for _, k := range restore.Kinds() {
		strategies = append(strategies, string(k))
	}
	res, err := bench.RunStrategies(ctx, e.c, cases, strategies, 1, progressT(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range fns {
		for _, s := range strategies {
			c, ok := res.Cells[fn][s]
			if !ok || c.Total.N != 1 || c.Total.Median <= 0 || c.Setup.Median <= 0 {
				t.Errorf("%s/%s not measured: %+v", fn, s, c)
			}
		}
	}
	// json's test input came from Redis: the function reports what it read.
	for _, smp := range res.Samples {
		if smp.Function == "json" && smp.GuestMS <= 0 {
			t.Errorf("json sample without guest time: %+v", smp)
		}
	}
	md := res.Markdown()
	for _, want := range []string{"| hello | vanilla |", "| json | faasnap |", "faasnap over vanilla"} {
		if !strings.Contains(md, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	t.Logf("\n%s", md)
}

// TestSmokeEvalBurst keeps the burst experiment working: hello prepared
// once, bursts of two cold invocations under every strategy from one
// snapshot and from two (the warm snapshot and a copy made through the
// API), one repetition; then the result files. The copy is deleted after.
func TestSmokeEvalBurst(t *testing.T) {
	parallel(t)
	e, ctx, r := startEvalEnv(t)
	cfg := eval.DefaultEvalConfig(repoPath("."))
	cfg.Experiments, cfg.BurstFunctions, cfg.BurstSizes, cfg.Reps = []string{eval.ExpBurst}, []string{"hello"}, []int{2}, 1
	res, err := eval.RunEval(ctx, e.c, r, cfg, progressT(t))
	if err != nil {
		t.Fatal(err)
	}
	info, _ := e.c.Info(ctx)
	if want := 2 * len(info.Strategies); len(res.Burst) != want {
		t.Fatalf("%d burst rows, want %d: %+v", len(res.Burst), want, res.Burst)
	}
	snaps := map[string]map[string]bool{}
	for _, s := range res.Samples {
		if snaps[s.BurstMode] == nil {
			snaps[s.BurstMode] = map[string]bool{}
		}
		snaps[s.BurstMode][s.Snapshot] = true
	}
	if len(snaps[eval.BurstSame]) != 1 || len(snaps[eval.BurstDifferent]) != 2 {
		t.Errorf("snapshots used: %v", snaps)
	}
	for _, b := range res.Burst {
		if b.Size != 2 || b.Mean.N != 1 || b.Mean.Median <= 0 || b.Wall.Median < b.Max.Median {
			t.Errorf("burst row %+v", b)
		}
	}
	left, err := e.c.ListSnapshots(ctx, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 { // clean and warm; the copy is gone
		t.Errorf("%d snapshots left after the bursts, want 2", len(left))
	}
	paths, err := eval.WriteEval(t.TempDir(), res)
	if err != nil || len(paths) != 5 { // jsonl, json, 2 figures, md
		t.Errorf("wrote %v: %v", paths, err)
	}
	t.Logf("\n%s", res.Markdown())
}

// startEvalEnv starts a daemon and a Redis server for the inputs; the
// server stops when the test ends.
func startEvalEnv(t *testing.T) (*env, context.Context, *inputs.Redis) {
	t.Helper()
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	r, err := inputs.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	return e, ctx, r
}

// progressT is where the harness reports progress: the test's log with
// -v, nowhere without.
func progressT(t *testing.T) io.Writer {
	if testing.Verbose() {
		return &testWriter{t}
	}
	return io.Discard
}

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestSmokeEvalAblation keeps the ablation working on real VMs: hello and
// image prepared with FaaSnap's variants, every Figure 9 step and
// technique off once, traced by the daemon's tracepoint program; then the
// result files.
func TestSmokeEvalAblation(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.FaultTraceObject = repoPath("bin/faulttrace.bpf.o") })
	ctx := ctxT(t)
	r, err := inputs.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	cfg := eval.DefaultEvalConfig(repoPath("."))
	cfg.Experiments, cfg.AblationFunctions, cfg.Reps = []string{eval.ExpAblation}, []string{"hello", "image"}, 1
	res, err := eval.RunEval(ctx, e.c, r, cfg, progressT(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Notes) > 0 || len(res.Ablation) != 5+7 {
		t.Fatalf("%d ablation rows, notes %v", len(res.Ablation), res.Notes)
	}
	for _, row := range res.Ablation {
		if row.N != 1 || row.Total.Median <= 0 || !row.Traced || row.VMMFaults == 0 {
			t.Errorf("row %+v", row)
		}
		// The loader reads what the variant says: the loading set, or for
		// vanilla nothing.
		if (row.Arm.Strategy == "vanilla") != (row.LoaderMiB == 0) {
			t.Errorf("%s %s: loader read %.1f MiB", row.Function, row.Arm.Label(), row.LoaderMiB)
		}
	}
	for _, s := range res.Samples {
		if s.Strategy != eval.Warm && (s.Trace == nil || s.Trace.VMMFaults < s.MajorFaults) {
			t.Errorf("sample %s/%s: trace %+v, %d major faults", s.Function, s.Variant, s.Trace, s.MajorFaults)
		}
	}
	paths, err := eval.WriteEval(t.TempDir(), res)
	if err != nil || len(paths) != 4 { // jsonl, json, the steps figure, md
		t.Errorf("wrote %v: %v", paths, err)
	}
	t.Logf("\n%s", res.Markdown())
}
