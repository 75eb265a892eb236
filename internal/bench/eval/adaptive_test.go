package eval

import (
	"context"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench"
)

// The summary of a drift run: sums per arm and phase, bytes per phase,
// the best fixed arm in hindsight, auto against it and against vanilla,
// when a refresh came and the outside share before and after it; the
// report and the plots say so.
func TestAdaptiveSummary(t *testing.T) {
	r := &AdaptiveResult{Experiment: "drift", Drift: &DriftConfig{Case: bench.FunctionCase{Name: "image"}, ColdStarts: 4}}
	add := func(arm, phase string, step int, total float64, fetched uint64, outside float64, refreshed bool) {
		r.Samples = append(r.Samples, AdaptiveSample{Arm: arm, Phase: phase, Step: step, Strategy: strings.TrimSuffix(arm, refreshSuffix),
			TotalMS: total, FetchedBytes: fetched, SetPages: 10, OutsideRatio: outside, Refreshed: refreshed, How: "function"})
	}
	for step, ph := range []string{"A", "A", "B", "B"} {
		add("vanilla", ph, step, 1000, 80<<20, 0, false)
		add("reap", ph, step, map[string]float64{"A": 500, "B": 900}[ph], 8<<20, map[string]float64{"A": 0.01, "B": 0.34}[ph], false)
		add("reap+refresh", ph, step, 500, 8<<20, map[bool]float64{true: 0.34, false: 0.01}[step == 2], step == 3)
	}
	for step, ph := range []string{"A", "A", "B", "B"} {
		r.Samples = append(r.Samples, AdaptiveSample{Arm: ArmAuto, Phase: ph, Step: step, Strategy: "faasnap", TotalMS: 650,
			How: map[bool]string{true: "explore", false: "exploit"}[step == 1]})
	}
	if err := r.finish(context.Background(), nil, ""); err != nil {
		t.Fatal(err)
	}
	reap := r.Arms["reap"]
	if reap.TotalMS != 2800 || reap.PhaseMS["A"] != 1000 || reap.PhaseMS["B"] != 1800 || reap.FetchedBytes["B"] != 16<<20 ||
		reap.RefreshAt != -1 || reap.OutsideDrift != 0.34 {
		t.Fatalf("reap %+v", reap)
	}
	rr := r.Arms["reap+refresh"]
	if rr.RefreshAt != 3 || rr.OutsideDrift != 0.34 || rr.OutsideAfter != 0.01 {
		t.Fatalf("reap+refresh %+v", rr)
	}
	if r.Best != "reap" || r.AutoOverBest != 2600.0/2800 || r.DefaultOverAuto != 4000.0/2600 || r.Arms[ArmAuto].Explorations != 1 {
		t.Fatalf("best %s, auto over best %.3f, vanilla over auto %.3f", r.Best, r.AutoOverBest, r.DefaultOverAuto)
	}
	md := r.Markdown()
	for _, want := range []string{"## Drift: image", "| auto | 2.60 | 1.30 | 1.30 | 650 | 650 |", "| reap+refresh | 2.00 |", "34% → 1%",
		"Best fixed strategy in hindsight: **reap**. Auto over it: **0.929**", "vanilla) over auto: **1.538**"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	figs := r.Figures()
	for _, f := range []string{"drift-cumulative.svg", "drift-totals.svg", "drift-outside.svg"} {
		if !strings.Contains(figs[f], "<svg") || !strings.Contains(figs[f], "reap+refresh") {
			t.Errorf("figure %s missing or without the arms", f)
		}
	}
}
