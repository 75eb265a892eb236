package e2e

import (
	"io"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/inputs"
	"github.com/thaw-dev/thaw/internal/restore"
)

// TestSmokeEvaluation keeps the evaluation harness working: hello and json
// with their Table 2 inputs in a real Redis server on loopback (record A,
// test B), every strategy, one repetition, cold (cache evicted), through
// the real daemon and VMs. It checks that every cell was measured, not how
// fast anything was.
func TestSmokeEvaluation(t *testing.T) {
	e := startEnv(t, t.TempDir())
	ctx := ctxT(t)
	r, err := inputs.StartRedis(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	fns := []string{"hello", "json"}
	if _, err := inputs.Load(ctx, r, fns, nil, nil); err != nil {
		t.Fatal(err)
	}
	cases, err := bench.RedisCases(r, repoPath("."), fns, "A", "B")
	if err != nil {
		t.Fatal(err)
	}
	var strategies []string
	for _, k := range restore.Kinds {
		strategies = append(strategies, string(k))
	}
	progress := io.Discard
	if testing.Verbose() {
		progress = &testWriter{t}
	}
	res, err := bench.RunStrategies(ctx, e.c, cases, strategies, 1, progress)
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

type testWriter struct{ t *testing.T }

func (w *testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
