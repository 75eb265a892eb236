package eval

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/thaw-dev/thaw/internal/bench"
)

// Markdown is the run's report.
func (r *AdaptiveResult) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	switch r.Experiment {
	case "drift":
		c := r.Drift
		p("## Drift: %s, input A then B\n\n", c.Case.Name)
		p("%d cold starts per arm, the first %d with input A (the prepare's, `%s`), the rest with B (`%s`); "+
			"every cold start evicts its snapshot's files from the page cache first; the arms take turns at every step.\n\n",
			c.ColdStarts, c.ColdStarts/2, compact(c.Case.RecordEvent), compact(c.Case.TestEvent))
	case "mixed":
		c := r.Mixed
		names := make([]string, len(c.Cases))
		for i, fc := range c.Cases {
			names[i] = fc.Name
		}
		p("## Mixed: %d functions, local and remote\n\n", len(c.Cases))
		p("Functions %s, each prepared with input A and invoked with B, both from the local disk and from the registry "+
			"(imported lazily, memory fetched on demand; chunk cache budget %s), %d rounds of a shuffled mix (seed %d); "+
			"every cold start evicts its snapshot's files from the page cache first.\n\n",
			strings.Join(names, ", "), fmtMiBytes(uint64(max(c.ChunkCacheBudget, 0))), c.Rounds, c.Seed)
	}
	p("Machine: %d cores, %s, %s (%s), QEMU %s; %s.\n\n", r.Machine.Cores, r.Machine.CPU, r.Machine.Kernel, r.Machine.Accel,
		r.Machine.QEMU, r.When.Format("2006-01-02 15:04 UTC"))
	r.armTable(&b)
	p("\nBest fixed strategy in hindsight: **%s**. Auto over it: **%.3f** (target ≤ 1.05). ", r.Best, r.AutoOverBest)
	if r.DefaultOverAuto > 0 {
		p("The default fixed strategy (vanilla) over auto: **%.3f** (target ≥ 1.15 on the drift sequence).", r.DefaultOverAuto)
	}
	p("\n")
	return b.String()
}

func (r *AdaptiveResult) phases() []string {
	if r.Experiment == "mixed" {
		return []string{mixedLocal, mixedRemote}
	}
	return []string{driftPhaseA, driftPhaseB}
}

// armTable writes one row per arm.
func (r *AdaptiveResult) armTable(b *strings.Builder) {
	ph := r.phases()
	fmt.Fprintf(b, "| arm | total s | %s s | %s s | median %s ms | median %s ms | fetched %s MiB | fetched %s MiB | ran | explored | refresh at | outside (B; before → after a refresh) |\n",
		ph[0], ph[1], ph[0], ph[1], ph[0], ph[1])
	fmt.Fprintf(b, "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n")
	for _, arm := range r.armOrder() {
		a := r.Arms[arm]
		var ran []string
		for _, k := range sortedKeys(a.Strategies) {
			ran = append(ran, fmt.Sprintf("%s %d", k, a.Strategies[k]))
		}
		refresh, outside := "-", "-"
		if a.RefreshAt >= 0 {
			refresh = fmt.Sprint(a.RefreshAt)
		}
		switch {
		case a.RefreshAt >= 0:
			outside = fmt.Sprintf("%.0f%% → %.0f%%", a.OutsideDrift*100, a.OutsideAfter*100)
		case a.OutsideDrift > 0:
			outside = fmt.Sprintf("%.0f%%", a.OutsideDrift*100)
		}
		fmt.Fprintf(b, "| %s | %.2f | %.2f | %.2f | %.0f | %.0f | %.1f | %.1f | %s | %d | %s | %s |\n", arm, a.TotalMS/1000,
			a.PhaseMS[ph[0]]/1000, a.PhaseMS[ph[1]]/1000, a.PhaseMedian[ph[0]], a.PhaseMedian[ph[1]], float64(a.FetchedBytes[ph[0]])/(1<<20),
			float64(a.FetchedBytes[ph[1]])/(1<<20), strings.Join(ran, ", "), a.Explorations, refresh, outside)
	}
}

// armOrder is auto first, then the arms by total.
func (r *AdaptiveResult) armOrder() []string {
	var arms []string
	for k := range r.Arms {
		if k != ArmAuto {
			arms = append(arms, k)
		}
	}
	sort.Slice(arms, func(i, j int) bool { return r.Arms[arms[i]].TotalMS < r.Arms[arms[j]].TotalMS })
	if _, ok := r.Arms[ArmAuto]; ok {
		arms = append([]string{ArmAuto}, arms...)
	}
	return arms
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Figures are the run's plots: cumulative totals over the sequence per
// arm, each cold start's total, and (drift) the set's outside share.
func (r *AdaptiveResult) Figures() map[string]string {
	var cum, each, outside []bench.Line
	for _, arm := range r.armOrder() {
		var xs, ys, ts, os, oxs []float64
		sum := 0.0
		steps := map[int]float64{}
		for _, s := range r.Samples {
			if s.Arm == arm {
				steps[s.Step] += s.TotalMS
				if s.SetPages > 0 {
					oxs, os = append(oxs, float64(s.Step)), append(os, s.OutsideRatio*100)
				}
			}
		}
		keys := make([]int, 0, len(steps))
		for k := range steps {
			keys = append(keys, k)
		}
		sort.Ints(keys)
		for _, k := range keys {
			sum += steps[k]
			xs, ys, ts = append(xs, float64(k)), append(ys, sum/1000), append(ts, steps[k])
		}
		cum = append(cum, bench.Line{Name: arm, X: xs, Y: ys})
		each = append(each, bench.Line{Name: arm, X: xs, Y: ts})
		if len(os) > 0 {
			outside = append(outside, bench.Line{Name: arm, X: oxs, Y: os})
		}
	}
	step := "step (a cold start of every arm)"
	if r.Experiment == "mixed" {
		step = "round"
	}
	out := map[string]string{
		r.Experiment + "-cumulative.svg": bench.LineChart{Title: r.Experiment + ": cumulative cold-start total per arm", XLabel: step,
			YLabel: "cumulative total (s)", Series: cum}.SVG(),
		r.Experiment + "-totals.svg": bench.LineChart{Title: r.Experiment + ": cold-start totals per step", XLabel: step,
			YLabel: "total per step (ms)", Series: each}.SVG(),
	}
	if r.Experiment == "drift" && len(outside) > 0 {
		out["drift-outside.svg"] = bench.LineChart{Title: "drift: touched pages outside the recorded set", XLabel: step,
			YLabel: "outside the set (%)", Series: outside}.SVG()
	}
	if r.Experiment == "mixed" {
		out["mixed-locations.svg"] = r.locationBars()
	}
	return out
}

// locationBars is each arm's total per location.
func (r *AdaptiveResult) locationBars() string {
	arms := r.armOrder()
	vals := make([][]float64, 2)
	for i, loc := range []string{mixedLocal, mixedRemote} {
		for _, arm := range arms {
			v := r.Arms[arm].PhaseMS[loc] / 1000
			if v == 0 {
				v = math.NaN()
			}
			vals[i] = append(vals[i], v)
		}
	}
	return bench.BarChart{Title: "mixed: total per location and arm", YLabel: "total (s)", Groups: []string{mixedLocal, mixedRemote},
		Series: arms, Values: vals}.SVG()
}

// compact is an event on one line.
func compact(ev json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, ev) != nil {
		return string(ev)
	}
	return b.String()
}
