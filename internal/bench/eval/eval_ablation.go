package eval

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/wire"
)

// ExpAblation is FaaSnap's Figure 9 (§6.5: the optimization steps on one
// function) and a table of all of FaaSnap with one technique off in turn,
// over several functions (docs/bench/ablation.md).
const ExpAblation = "ablation"

// Arm is one restore of the ablation: a strategy and a variant of it.
type Arm struct {
	Strategy string `json:"strategy"`
	Variant  string `json:"variant,omitempty"`
}

// Label names the arm in tables: the strategy, or strategy/variant.
func (a Arm) Label() string {
	if a.Variant == "" {
		return a.Strategy
	}
	return a.Strategy + "/" + a.Variant
}

// Figure 9's steps, in the paper's order: Firecracker-like vanilla,
// concurrent paging alone, per-region mapping (§4.2-4.5), all of FaaSnap.
var figure9Arms = []Arm{{"vanilla", ""}, {"faasnap", wire.VariantConcurrent}, {"faasnap", wire.VariantNoLoadingSet}, {"faasnap", ""}}

// techniqueOffArms: all of FaaSnap, then each technique off in turn
// (loading-set file, host page recording, freed-page filtering, merging).
var techniqueOffArms = []Arm{{"faasnap", ""}, {"faasnap", wire.VariantNoLoadingSet}, {"faasnap", wire.VariantNoHostRec},
	{"faasnap", wire.VariantNoFreed}, {"faasnap", wire.VariantNoMerge}}

// ablationArms are the arms measured on fn, interleaved in every round.
func (c *EvalConfig) ablationArms(fn string) []Arm {
	arms := slices.Clone(techniqueOffArms)
	if fn == c.Figure9Function {
		for _, a := range figure9Arms {
			if !slices.Contains(arms, a) {
				arms = append(arms, a)
			}
		}
	}
	return arms
}

// ablation runs every ablation function: record A, test B, reps rounds of
// cold invocations over its arms (order rotated every round, so drift
// spreads over all of them), then warm invocations for the paging view.
func (r *evalRun) ablation(ctx context.Context) error {
	return r.perFunction(ctx, ExpAblation, r.cfg.AblationFunctions, r.ablationOf)
}

func (r *evalRun) ablationOf(ctx context.Context, fn string) error {
	pr, ev, err := r.recordATestB(ctx, fn)
	if err != nil {
		return err
	}
	arms := r.cfg.ablationArms(fn)
	for rep := 0; rep < r.cfg.Reps; rep++ {
		for i := range arms {
			a := arms[(i+rep)%len(arms)]
			base := EvalSample{Experiment: ExpAblation, Record: "A", Test: "B", Variant: a.Variant,
				StrategySample: bench.StrategySample{Function: fn, Rep: rep}}
			smp, err := r.cold(ctx, base, pr.Warm.ID, a.Strategy, a.Variant, ev, true)
			if err != nil {
				return err
			}
			r.add(smp, estCold(fn, 1))
		}
	}
	return r.warm(ctx, ExpAblation, fn, "A", "B", pr.Warm.ID, ev)
}

// AblationRow is one function under one arm (medians; traced counters
// only when the daemon traced faults).
type AblationRow struct {
	Function string        `json:"function"`
	Arm      Arm           `json:"arm"`
	N        int           `json:"n"`
	Total    bench.Summary `json:"total_ms"`
	SetupMS  float64       `json:"setup_ms"`
	ResumeMS float64       `json:"resume_ms"`
	InvokeMS float64       `json:"invoke_ms"`
	// PagingMS is the total less the handler's own compute (the warm
	// invocation's guest time), as in the paging view; NaN without warm.
	PagingMS    float64 `json:"paging_ms"`
	MajorFaults float64 `json:"major_faults"`
	MinorFaults float64 `json:"minor_faults"`
	QEMUMiB     float64 `json:"qemu_read_mib"`
	LoaderMiB   float64 `json:"loader_mib"`
	LoaderMS    float64 `json:"loader_ms"`
	// Tracepoint counters (thawd --fault-trace-object).
	Traced          bool    `json:"traced"`
	VMMFaults       float64 `json:"vmm_faults"`
	VMMReadRequests float64 `json:"vmm_read_requests"`
	VMMBlockedMS    float64 `json:"vmm_blocked_ms"`
	DaemonRequests  float64 `json:"daemon_read_requests"`
	// VsFaaSnap is the median total over all of FaaSnap's (1 = as fast).
	VsFaaSnap float64 `json:"vs_faasnap"`
}

// ablationRows summarizes the ablation's cold samples by function and arm.
func (r *EvalResult) ablationRows() []AblationRow {
	warm := map[string]float64{}
	cold, keys := r.group(func(s EvalSample) bool { return s.Experiment == ExpAblation },
		func(s EvalSample) string { return s.Function + "\x00" + Arm{s.Strategy, s.Variant}.Label() })
	var rows []AblationRow
	for _, k := range keys {
		ss := cold[k]
		if ss[0].Strategy == Warm {
			warm[ss[0].Function] = median(ss, func(s EvalSample) float64 { return s.GuestMS })
		}
	}
	for _, k := range keys {
		ss := cold[k]
		if ss[0].Strategy == Warm {
			continue
		}
		row := AblationRow{Function: ss[0].Function, Arm: Arm{ss[0].Strategy, ss[0].Variant}, N: len(ss),
			Total:       summarizeOf(ss, func(s EvalSample) float64 { return s.TotalMS }),
			SetupMS:     median(ss, func(s EvalSample) float64 { return s.SetupMS }),
			ResumeMS:    median(ss, func(s EvalSample) float64 { return s.ResumeMS }),
			InvokeMS:    median(ss, func(s EvalSample) float64 { return s.InvokeMS }),
			PagingMS:    math.NaN(),
			MajorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MajorFaults) }),
			MinorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MinorFaults) }),
			QEMUMiB:     median(ss, func(s EvalSample) float64 { return float64(s.ReadBytes) / (1 << 20) }),
			LoaderMiB:   median(ss, func(s EvalSample) float64 { return s.StatNum("loader_bytes") / (1 << 20) }),
			LoaderMS:    median(ss, func(s EvalSample) float64 { return s.StatNum("loader_ms") }),
		}
		if compute, ok := warm[row.Function]; ok {
			row.PagingMS = median(ss, func(s EvalSample) float64 { return s.TotalMS - compute })
		}
		if ss[0].Trace != nil {
			tr := func(f func(*client.FaultTrace) float64) float64 {
				return median(ss, func(s EvalSample) float64 {
					if s.Trace == nil {
						return math.NaN()
					}
					return f(s.Trace)
				})
			}
			row.Traced = true
			row.VMMFaults = tr(func(t *client.FaultTrace) float64 { return float64(t.VMMFaults) })
			row.VMMReadRequests = tr(func(t *client.FaultTrace) float64 { return float64(t.VMMReadRequests) })
			row.VMMBlockedMS = tr(func(t *client.FaultTrace) float64 { return t.VMMBlockedMS })
			row.DaemonRequests = tr(func(t *client.FaultTrace) float64 { return float64(t.DaemonReadRequests) })
		}
		rows = append(rows, row)
	}
	full := map[string]float64{}
	for _, row := range rows {
		if row.Arm == (Arm{"faasnap", ""}) {
			full[row.Function] = row.Total.Median
		}
	}
	for i := range rows {
		rows[i].VsFaaSnap = math.NaN()
		if f, ok := full[rows[i].Function]; ok && f > 0 {
			rows[i].VsFaaSnap = rows[i].Total.Median / f
		}
	}
	o := r.order()
	// Figure 9's steps first on its function, then the techniques off.
	armRank := func(fn string, a Arm) int {
		if i := slices.Index(figure9Arms, a); i >= 0 && fn == r.Config.Figure9Function {
			return i
		}
		return len(figure9Arms) + slices.Index(techniqueOffArms, a)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Function != b.Function {
			return o.less(a.Function, "", b.Function, "")
		}
		return armRank(a.Function, a.Arm) < armRank(b.Function, b.Arm)
	})
	return rows
}

// ablationMarkdown renders the Figure 9 table (the Figure 9 function's
// steps) and the technique-off table.
func (r *EvalResult) ablationMarkdown(b *strings.Builder) {
	if len(r.Ablation) == 0 {
		return
	}
	nf := func(v float64, f string) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf(f, v)
	}
	traced := slices.ContainsFunc(r.Ablation, func(a AblationRow) bool { return a.Traced })
	fn9 := r.Config.Figure9Function
	fmt.Fprintf(b, "## Optimization steps (Figure 9, `%s`)\n\nRecord A, test B, cold, steps interleaved in every round; medians. Paging: total less the warm invocation's guest time. Faults and QEMU's reads: /proc, vCPUs resumed to answer. ", fn9)
	if traced {
		b.WriteString("Traced (eBPF tracepoints): QEMU's user page faults, the read requests (bios) QEMU submitted (its page faults' reads), the time its threads were blocked in D state (page faults waiting for I/O) and the read requests the daemon's loader submitted.\n\n")
		b.WriteString("| step | n | total ms | p10–p90 | paging ms | major faults | minor faults | QEMU read MiB | loader MiB | traced faults | QEMU read requests | blocked ms | loader read requests |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	} else {
		b.WriteString("(No tracepoint counters: the daemon ran without --fault-trace-object.)\n\n")
		b.WriteString("| step | n | total ms | p10–p90 | paging ms | major faults | minor faults | QEMU read MiB | loader MiB |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	}
	for _, a := range figure9Arms {
		for _, row := range r.Ablation {
			if row.Function != fn9 || row.Arm != a {
				continue
			}
			fmt.Fprintf(b, "| %s | %d | **%.1f** | %s | %s | %.0f | %.0f | %.1f | %.1f |", row.Arm.Label(), row.N, row.Total.Median, spread(row.Total),
				nf(row.PagingMS, "%.1f"), row.MajorFaults, row.MinorFaults, row.QEMUMiB, row.LoaderMiB)
			if traced {
				fmt.Fprintf(b, " %s | %s | %s | %s |", nf(row.VMMFaults, "%.0f"), nf(row.VMMReadRequests, "%.0f"), nf(row.VMMBlockedMS, "%.1f"), nf(row.DaemonRequests, "%.0f"))
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n## Techniques off\n\nAll of FaaSnap, then one technique off at a time: the loading-set file (`no-loadingset`: the loader reads the memory file in group order), host page recording (`no-hostrec`: the working set is the pages the guest faulted), freed-page filtering (`no-freed`), region merging (`no-merge`). Record A, test B, cold; medians; ×faasnap is the median total over all of FaaSnap's.\n\n")
	b.WriteString("| function | arm | n | total ms | p10–p90 | ×faasnap | paging ms | major faults | QEMU read MiB | loader MiB | loader ms |")
	sep := "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	if traced {
		b.WriteString(" QEMU read requests | blocked ms |")
		sep += "---:|---:|"
	}
	b.WriteString("\n" + sep + "\n")
	for _, row := range r.Ablation {
		if !slices.Contains(techniqueOffArms, row.Arm) {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %d | **%.1f** | %s | %s | %s | %.0f | %.1f | %.1f | %.1f |", row.Function, row.Arm.Label(), row.N, row.Total.Median,
			spread(row.Total), nf(row.VsFaaSnap, "%.2f"), nf(row.PagingMS, "%.1f"), row.MajorFaults, row.QEMUMiB, row.LoaderMiB, row.LoaderMS)
		if traced {
			fmt.Fprintf(b, " %s | %s |", nf(row.VMMReadRequests, "%.0f"), nf(row.VMMBlockedMS, "%.1f"))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// ablationFigure is Figure 9 as bars: the steps' total and paging time.
func (r *EvalResult) ablationFigure() (Figure, bool) {
	var series []string
	var vals []float64
	for _, a := range figure9Arms {
		for _, row := range r.Ablation {
			if row.Function == r.Config.Figure9Function && row.Arm == a {
				series = append(series, a.Label())
				vals = append(vals, row.Total.Median)
			}
		}
	}
	if len(series) == 0 {
		return Figure{}, false
	}
	c := bench.BarChart{Title: fmt.Sprintf("Optimization steps (Figure 9): %s, record A / test B (median)", r.Config.Figure9Function),
		YLabel: "total time (ms)", Groups: []string{r.Config.Figure9Function}, Series: series, Values: [][]float64{vals}}
	return Figure{Name: "ablation-steps.svg", Title: c.Title, SVG: c.SVG()}, true
}
