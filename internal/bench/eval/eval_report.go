package eval

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/inputs"
)

// EvalResult is an evaluation run: configuration, machine, raw samples and
// their summaries.
type EvalResult struct {
	Machine     bench.Machine              `json:"machine"`
	ReadaheadKB int                        `json:"readahead_kb"`
	Storage     *bench.Storage             `json:"storage,omitempty"` // nil: the local disk
	When        time.Time                  `json:"when"`
	DurationS   float64                    `json:"duration_s"`
	Config      EvalConfig                 `json:"config"`
	Prepared    map[string]json.RawMessage `json:"prepared"` // "function/record variant" -> prepare result
	Notes       []string                   `json:"notes,omitempty"`
	Samples     []EvalSample               `json:"-"` // in the JSON lines file

	Exec     []ExecRow    `json:"exec"`
	Speedups []SpeedupRow `json:"speedups"`
	// Paging is the paging view of Exec: each cold cell with the handler's
	// own compute (the warm invocation's guest time) taken out, by phase.
	Paging         []PagingRow    `json:"paging"`
	PagingSpeedups []SpeedupRow   `json:"paging_speedups"`
	Size           []SizeRow      `json:"size"`
	Burst          []BurstRow     `json:"burst"`
	Breakdown      []BreakdownRow `json:"breakdown"`
	Ablation       []AblationRow  `json:"ablation,omitempty"`
}

// ExecRow is one function under one strategy in one direction.
type ExecRow struct {
	Record   string `json:"record"`
	Test     string `json:"test"`
	Function string `json:"function"`
	Strategy string `json:"strategy"`
	bench.Cell
}

// SpeedupRow is a geometric mean over functions of a ratio of median
// totals: Num over Den is Den's median / Num's (how many times faster Num
// is); Num "to" Den is Num's / Den's (1 = as fast).
type SpeedupRow struct {
	Direction string  `json:"direction"` // "A→B", "B→A" or "both"
	Name      string  `json:"name"`      // "faasnap over vanilla", "faasnap to warm", ...
	Value     float64 `json:"value"`
	Functions int     `json:"functions"`
}

// PagingRow is one cold cell of the execution-time experiment in the
// paging view (medians, ms). Compute is the handler's own work: the warm
// invocation's guest time for the same function and inputs. InHandler is
// the cold invocation's round trip less Compute: the handler's page
// faults, TCG's first translation of the code it runs and the agent round
// trip, which this view cannot tell apart. Paging is the cold total less
// Compute: set-up, resume and InHandler. Teardown comes after the answer
// (0 where the run did not record it).
type PagingRow struct {
	Record    string  `json:"record"`
	Test      string  `json:"test"`
	Function  string  `json:"function"`
	Strategy  string  `json:"strategy"`
	ComputeMS float64 `json:"compute_ms"`
	SetupMS   float64 `json:"setup_ms"`
	ResumeMS  float64 `json:"resume_ms"`
	InHandler float64 `json:"in_handler_ms"`
	Teardown  float64 `json:"teardown_ms"`
	PagingMS  float64 `json:"paging_ms"`
	TotalMS   float64 `json:"total_ms"`
}

// SizeRow is one function, strategy and input ratio of Figure 8.
type SizeRow struct {
	Function string        `json:"function"`
	Strategy string        `json:"strategy"`
	Ratio    float64       `json:"input_ratio"`
	Total    bench.Summary `json:"total_ms"`
	Invoke   bench.Summary `json:"invoke_ms"`
}

// BurstRow is one function, mode, burst size and strategy of Figure 10.
// Mean summarizes, over repetitions, the mean total time of a burst's
// invocations; Max the slowest one's; Wall the time until the last answer.
type BurstRow struct {
	Function string        `json:"function"`
	Mode     string        `json:"mode"`
	Size     int           `json:"size"`
	Strategy string        `json:"strategy"`
	Mean     bench.Summary `json:"mean_total_ms"`
	Max      bench.Summary `json:"max_total_ms"`
	Wall     bench.Summary `json:"wall_ms"`
}

// BreakdownRow is Table 3 for one function and strategy (medians).
type BreakdownRow struct {
	Function    string  `json:"function"`
	Strategy    string  `json:"strategy"`
	N           int     `json:"n"`
	TotalMS     float64 `json:"total_ms"`
	FetchMS     float64 `json:"fetch_ms"`
	FetchMiB    float64 `json:"fetch_mib"`
	MajorFaults float64 `json:"major_faults"`
	MinorFaults float64 `json:"minor_faults"`
	QEMUMiB     float64 `json:"qemu_read_mib"`
	DaemonMiB   float64 `json:"daemon_read_mib"`
}

func median(ss []EvalSample, f func(EvalSample) float64) float64 {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return bench.Summarize(xs).Median
}

func summarizeOf(ss []EvalSample, f func(EvalSample) float64) bench.Summary {
	xs := make([]float64, len(ss))
	for i, s := range ss {
		xs[i] = f(s)
	}
	return bench.Summarize(xs)
}

// cellOf summarizes samples as the strategies benchmark does.
func cellOf(ss []EvalSample) bench.Cell {
	return bench.Cell{
		Total:       summarizeOf(ss, func(s EvalSample) float64 { return s.TotalMS }),
		Setup:       summarizeOf(ss, func(s EvalSample) float64 { return s.SetupMS }),
		Resume:      summarizeOf(ss, func(s EvalSample) float64 { return s.ResumeMS }),
		Invoke:      summarizeOf(ss, func(s EvalSample) float64 { return s.InvokeMS }),
		MajorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MajorFaults) }),
		MinorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MinorFaults) }),
		ReadMiB:     median(ss, func(s EvalSample) float64 { return float64(s.ReadBytes) / (1 << 20) }),
		DaemonMiB:   median(ss, func(s EvalSample) float64 { return float64(s.DaemonBytes) / (1 << 20) }),
	}
}

// order sorts functions in Table 2's order and strategies as configured,
// warm first.
type order struct{ fns, strategies []string }

func (r *EvalResult) order() order {
	return order{fns: inputs.Functions(), strategies: append([]string{Warm}, r.Config.Strategies...)}
}

func rank(l []string, s string) int {
	if i := slices.Index(l, s); i >= 0 {
		return i
	}
	return len(l)
}

func (o order) less(fa, sa, fb, sb string) bool {
	if fa != fb {
		if ra, rb := rank(o.fns, fa), rank(o.fns, fb); ra != rb {
			return ra < rb
		}
		return fa < fb
	}
	return rank(o.strategies, sa) < rank(o.strategies, sb)
}

// Summarize computes every table from the samples.
func (r *EvalResult) Summarize() {
	o := r.order()
	r.Exec = r.execRows(o)
	r.Speedups = speedups(r.Exec, r.Config.Strategies)
	r.Paging = r.pagingRows()
	r.PagingSpeedups = speedups(pagingCells(r.Paging), r.Config.Strategies)
	r.Size = r.sizeRows(o)
	r.Burst = burstRows(r.Samples)
	sort.SliceStable(r.Burst, func(i, j int) bool {
		a, b := r.Burst[i], r.Burst[j]
		if a.Function != b.Function || a.Mode != b.Mode {
			if a.Function != b.Function {
				return o.less(a.Function, "", b.Function, "")
			}
			return a.Mode > b.Mode // same before different
		}
		if a.Strategy != b.Strategy {
			return o.less(a.Function, a.Strategy, b.Function, b.Strategy)
		}
		return a.Size < b.Size
	})
	r.Breakdown = r.breakdownRows(o)
	r.Ablation = r.ablationRows()
}

// group collects the samples keep accepts by key, keys in first-seen order.
func (r *EvalResult) group(keep func(EvalSample) bool, key func(EvalSample) string) (map[string][]EvalSample, []string) {
	m := map[string][]EvalSample{}
	var keys []string
	for _, s := range r.Samples {
		if !keep(s) {
			continue
		}
		k := key(s)
		if _, ok := m[k]; !ok {
			keys = append(keys, k)
		}
		m[k] = append(m[k], s)
	}
	return m, keys
}

// execRows: one cell per direction, function and strategy.
func (r *EvalResult) execRows(o order) []ExecRow {
	var rows []ExecRow
	execs, keys := r.group(func(s EvalSample) bool { return s.Experiment == ExpExec },
		func(s EvalSample) string {
			return s.Record + "\x00" + s.Test + "\x00" + s.Function + "\x00" + s.Strategy
		})
	for _, k := range keys {
		ss := execs[k]
		rows = append(rows, ExecRow{Record: ss[0].Record, Test: ss[0].Test, Function: ss[0].Function, Strategy: ss[0].Strategy, Cell: cellOf(ss)})
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Record != b.Record {
			return a.Record < b.Record
		}
		return o.less(a.Function, a.Strategy, b.Function, b.Strategy)
	})
	return rows
}

// pagingRows is the paging view of the execution-time cells that have a
// warm cell to take the handler's compute from.
func (r *EvalResult) pagingRows() []PagingRow {
	warm := map[[3]string]float64{} // record, test, function -> guest ms
	for _, e := range r.Exec {
		if e.Strategy == Warm {
			ss := r.execSamples(e)
			warm[[3]string{e.Record, e.Test, e.Function}] = median(ss, func(s EvalSample) float64 { return s.GuestMS })
		}
	}
	var rows []PagingRow
	for _, e := range r.Exec {
		compute, ok := warm[[3]string{e.Record, e.Test, e.Function}]
		if e.Strategy == Warm || !ok {
			continue
		}
		ss := r.execSamples(e)
		rows = append(rows, PagingRow{Record: e.Record, Test: e.Test, Function: e.Function, Strategy: e.Strategy,
			ComputeMS: compute, SetupMS: e.Setup.Median, ResumeMS: e.Resume.Median,
			InHandler: median(ss, func(s EvalSample) float64 { return s.InvokeMS - compute }),
			Teardown:  median(ss, func(s EvalSample) float64 { return s.TeardownMS }),
			PagingMS:  median(ss, func(s EvalSample) float64 { return s.TotalMS - compute }),
			TotalMS:   e.Total.Median})
	}
	return rows
}

// execSamples are the samples of one execution-time cell.
func (r *EvalResult) execSamples(e ExecRow) []EvalSample {
	var ss []EvalSample
	for _, s := range r.Samples {
		if s.Experiment == ExpExec && s.Record == e.Record && s.Test == e.Test && s.Function == e.Function && s.Strategy == e.Strategy {
			ss = append(ss, s)
		}
	}
	return ss
}

// pagingCells presents paging rows as cells whose total is the paging
// time, so speedups compares strategies in the paging view.
func pagingCells(rows []PagingRow) []ExecRow {
	out := make([]ExecRow, len(rows))
	for i, p := range rows {
		out[i] = ExecRow{Record: p.Record, Test: p.Test, Function: p.Function, Strategy: p.Strategy,
			Cell: bench.Cell{Total: bench.Summary{Median: p.PagingMS}}}
	}
	return out
}

// sizeRows: one row per function, strategy and input ratio.
func (r *EvalResult) sizeRows(o order) []SizeRow {
	var rows []SizeRow
	sizes, keys := r.group(func(s EvalSample) bool { return s.Experiment == ExpSize },
		func(s EvalSample) string { return fmt.Sprintf("%s\x00%s\x00%g", s.Function, s.Strategy, s.InputRatio) })
	for _, k := range keys {
		ss := sizes[k]
		rows = append(rows, SizeRow{Function: ss[0].Function, Strategy: ss[0].Strategy, Ratio: ss[0].InputRatio,
			Total:  summarizeOf(ss, func(s EvalSample) float64 { return s.TotalMS }),
			Invoke: summarizeOf(ss, func(s EvalSample) float64 { return s.InvokeMS })})
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Function != b.Function || a.Strategy != b.Strategy {
			return o.less(a.Function, a.Strategy, b.Function, b.Strategy)
		}
		return a.Ratio < b.Ratio
	})
	return rows
}

// breakdownRows: Table 3, from the breakdown runs and the A/B exec runs.
func (r *EvalResult) breakdownRows(o order) []BreakdownRow {
	if !r.Config.has(ExpBreakdown) {
		return nil
	}
	var rows []BreakdownRow
	bds, keys := r.group(func(s EvalSample) bool {
		return slices.Contains(r.Config.BreakdownFunctions, s.Function) && s.Strategy != Warm &&
			(s.Experiment == ExpBreakdown || (s.Experiment == ExpExec && s.Record == "A" && s.Test == "B"))
	}, func(s EvalSample) string { return s.Function + "\x00" + s.Strategy })
	for _, k := range keys {
		ss := bds[k]
		rows = append(rows, BreakdownRow{Function: ss[0].Function, Strategy: ss[0].Strategy, N: len(ss),
			TotalMS:     median(ss, func(s EvalSample) float64 { return s.TotalMS }),
			FetchMS:     median(ss, func(s EvalSample) float64 { return s.FetchMS }),
			FetchMiB:    median(ss, func(s EvalSample) float64 { return float64(s.FetchBytes) / (1 << 20) }),
			MajorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MajorFaults) }),
			MinorFaults: median(ss, func(s EvalSample) float64 { return float64(s.MinorFaults) }),
			QEMUMiB:     median(ss, func(s EvalSample) float64 { return float64(s.ReadBytes) / (1 << 20) }),
			DaemonMiB:   median(ss, func(s EvalSample) float64 { return float64(s.DaemonBytes) / (1 << 20) })})
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		return o.less(a.Function, a.Strategy, b.Function, b.Strategy)
	})
	return rows
}

// burstRows groups burst samples by burst (function, mode, size, strategy,
// repetition), reduces each burst to its mean, max and wall time, and
// summarizes those over repetitions.
func burstRows(samples []EvalSample) []BurstRow {
	type cellKey struct {
		fn, mode, s string
		n           int
	}
	type burstKey struct {
		cellKey
		rep int
	}
	bursts := map[burstKey][]EvalSample{}
	var order []burstKey
	for _, s := range samples {
		if s.Experiment != ExpBurst {
			continue
		}
		k := burstKey{cellKey{s.Function, s.BurstMode, s.Strategy, s.Burst}, s.Rep}
		if _, ok := bursts[k]; !ok {
			order = append(order, k)
		}
		bursts[k] = append(bursts[k], s)
	}
	type agg struct{ mean, max, wall []float64 }
	cells := map[cellKey]*agg{}
	var corder []cellKey
	for _, k := range order {
		ss := bursts[k]
		var sum, mx, wall float64
		for _, s := range ss {
			sum += s.TotalMS
			mx = math.Max(mx, s.TotalMS)
			wall = math.Max(wall, s.WallMS)
		}
		a, ok := cells[k.cellKey]
		if !ok {
			a = &agg{}
			cells[k.cellKey] = a
			corder = append(corder, k.cellKey)
		}
		a.mean = append(a.mean, sum/float64(len(ss)))
		a.max = append(a.max, mx)
		a.wall = append(a.wall, wall)
	}
	var out []BurstRow
	for _, k := range corder {
		a := cells[k]
		out = append(out, BurstRow{Function: k.fn, Mode: k.mode, Size: k.n, Strategy: k.s,
			Mean: bench.Summarize(a.mean), Max: bench.Summarize(a.max), Wall: bench.Summarize(a.wall)})
	}
	return out
}

// speedups are the headline ratios of the execution-time experiment, per
// direction and over both: faasnap over vanilla and over reap (times
// faster), faasnap to cached and to warm (1 = as fast), and every other
// strategy over vanilla.
func speedups(rows []ExecRow, strategies []string) []SpeedupRow {
	type pair struct {
		num, den string
		over     bool // den/num (times faster) instead of num/den
	}
	pairs := []pair{{"faasnap", "vanilla", true}, {"faasnap", "reap", true}, {"faasnap", "cached", false}, {"faasnap", Warm, false}}
	for _, s := range strategies {
		if s != "vanilla" && s != "faasnap" {
			pairs = append(pairs, pair{s, "vanilla", true})
		}
	}
	med := map[[4]string]float64{} // record, test, function, strategy
	var dirs []string
	for _, r := range rows {
		med[[4]string{r.Record, r.Test, r.Function, r.Strategy}] = r.Total.Median
		d := r.Record + "→" + r.Test
		if !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	var out []SpeedupRow
	for _, p := range pairs {
		all := []float64{}
		for _, d := range append(slices.Clone(dirs), "both") {
			var xs []float64
			for _, r := range rows {
				if r.Strategy != p.num || (d != "both" && r.Record+"→"+r.Test != d) {
					continue
				}
				den, ok := med[[4]string{r.Record, r.Test, r.Function, p.den}]
				if !ok || den <= 0 || r.Total.Median <= 0 {
					continue
				}
				if p.over {
					xs = append(xs, den/r.Total.Median)
				} else {
					xs = append(xs, r.Total.Median/den)
				}
			}
			if d == "both" {
				xs = all
				if len(dirs) < 2 {
					continue
				}
			} else {
				all = append(all, xs...)
			}
			if len(xs) == 0 {
				continue
			}
			name := p.num + " over " + p.den
			if !p.over {
				name = p.num + " to " + p.den
			}
			out = append(out, SpeedupRow{Direction: d, Name: name, Value: bench.GeoMean(xs), Functions: len(xs)})
		}
	}
	return out
}

// MachineLine describes the machine and run in one sentence.
func (r *EvalResult) MachineLine() string {
	m := r.Machine
	disk, fio := "disk "+m.Disk, ""
	if st := r.Storage; st != nil {
		disk = st.Text()
		if len(st.Fio) > 0 {
			fio = " fio on that storage (O_DIRECT reads): " + st.FioText() + "."
		}
	}
	return fmt.Sprintf("Machine: %d cores (%s), %d GiB memory, accelerator **%s**, %s with read_ahead_kb %d, %s, kernel %s, QEMU %s. Run %s, %s, %d repetitions.%s",
		m.Cores, m.CPU, m.MemoryGiB, m.Accel, disk, r.ReadaheadKB, m.HintText(), m.Kernel, m.QEMU,
		r.When.Format("2006-01-02 15:04 UTC"), (time.Duration(r.DurationS) * time.Second).String(), r.Config.Reps, fio)
}

func spread(s bench.Summary) string { return fmt.Sprintf("%.0f–%.0f", s.P10, s.P90) }

// writeSection writes a section of a report: its heading and text (intro),
// a table of rows (header, then a line per row), more (if any), a blank
// line; nothing without rows.
func writeSection[T any](b *strings.Builder, intro, header string, rows []T, line func(T) string, more func()) {
	if len(rows) == 0 {
		return
	}
	b.WriteString(intro + header)
	for _, row := range rows {
		b.WriteString(line(row))
	}
	if more != nil {
		more()
	}
	b.WriteString("\n")
}

// writeSpeedups renders speedup rows, if any, as a table of geometric
// means over functions of what, its first column headed ratioHeader.
func writeSpeedups(b *strings.Builder, what, ratioHeader string, rows []SpeedupRow) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nGeometric means over functions of %s:\n\n", what)
	fmt.Fprintf(b, "| %s | record→test | value | functions |\n|---|---|---:|---:|\n", ratioHeader)
	for _, s := range rows {
		fmt.Fprintf(b, "| %s | %s | **%.2f** | %d |\n", s.Name, s.Direction, s.Value, s.Functions)
	}
}

// Markdown renders every table of the run.
func (r *EvalResult) Markdown() string {
	var b strings.Builder
	b.WriteString(r.MachineLine() + "\n\n")
	b.WriteString("Cold invocations evict the snapshot's files from the host page cache first. Times are medians over repetitions with p10–p90; \"warm\" is the same invocation on a VM that is already running and has run it before (no restore). Reads: QEMU's from storage and the daemon's for the strategy.\n\n")
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "> %s\n\n", n)
	}
	writeSection(&b, "## Execution time (Figures 6 and 7)\n\n",
		"| record→test | function | strategy | total ms | p10–p90 | setup ms | resume ms | invoke ms | major faults | QEMU read MiB | daemon read MiB |\n"+
			"|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
		r.Exec, func(e ExecRow) string {
			return fmt.Sprintf("| %s→%s | %s | %s | **%.1f** | %s | %.1f | %.1f | %.1f | %.0f | %.1f | %.1f |\n", e.Record, e.Test, e.Function, e.Strategy,
				e.Total.Median, spread(e.Total), e.Setup.Median, e.Resume.Median, e.Invoke.Median, e.MajorFaults, e.ReadMiB, e.DaemonMiB)
		}, func() {
			writeSpeedups(&b, "ratios of median totals (\"X over Y\": how many times faster X is; \"X to Y\": X's time relative to Y's)", "ratio", r.Speedups)
		})
	writeSection(&b, "## Paging view\n\nEach cold cell with the handler's own compute taken out: compute is the warm invocation's guest time (the handler with everything resident and translated); in-handler is the cold invocation's round trip less compute (the handler's page faults, TCG's first translation of the code it runs and the agent round trip, which this view cannot tell apart); paging is the cold total less compute (set-up + resume + in-handler). Teardown comes after the answer (– where the run did not record it). Medians, ms.\n\n",
		"| record→test | function | strategy | compute | set-up | resume | in-handler | teardown | **paging** | total |\n|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
		r.Paging, func(p PagingRow) string {
			td := "–"
			if p.Teardown > 0 {
				td = fmt.Sprintf("%.1f", p.Teardown)
			}
			return fmt.Sprintf("| %s→%s | %s | %s | %.1f | %.1f | %.1f | %.1f | %s | **%.1f** | %.1f |\n", p.Record, p.Test, p.Function, p.Strategy,
				p.ComputeMS, p.SetupMS, p.ResumeMS, p.InHandler, td, p.PagingMS, p.TotalMS)
		}, func() { writeSpeedups(&b, "ratios of median paging times", "ratio (paging view)", r.PagingSpeedups) })
	writeSection(&b, "## Input size (Figure 8)\n\nRecorded with input A; tested with input B's content at the given ratio of A's size.\n\n",
		"| function | strategy | input ratio | total ms | p10–p90 | invoke ms |\n|---|---|---:|---:|---:|---:|\n",
		r.Size, func(s SizeRow) string {
			return fmt.Sprintf("| %s | %s | %s | **%.1f** | %s | %.1f |\n", s.Function, s.Strategy, bench.FormatRatio(s.Ratio), s.Total.Median, spread(s.Total), s.Invoke.Median)
		}, nil)
	writeSection(&b, "## Bursts (Figure 10)\n\nN concurrent cold invocations (record A, test B), from one snapshot (same) or from N copies of it (different: no shared page cache). Per burst: the mean and the maximum of the invocations' total times, and the wall time until the last answer; medians over repetitions.\n\n",
		"| function | snapshots | N | strategy | mean total ms | p10–p90 | max total ms | wall ms |\n|---|---|---:|---|---:|---:|---:|---:|\n",
		r.Burst, func(s BurstRow) string {
			return fmt.Sprintf("| %s | %s | %d | %s | **%.1f** | %s | %.1f | %.1f |\n", s.Function, s.Mode, s.Size, s.Strategy, s.Mean.Median, spread(s.Mean), s.Max.Median, s.Wall.Median)
		}, nil)
	writeSection(&b, "## Breakdown (Table 3)\n\nRecord A, test B, cold; medians. Fetch: the strategy's prefetch (REAP's working set), loader (FaaSnap's loading set), page-cache fill (cached, before the timer starts; bytes not reported), pre-faulting of the store copy (premap: bytes mapped, none read; on a device-DAX store also filling the VM's range of the device first) or in-kernel readahead until the captured set was resident (snapbpf): time and bytes. Faults: QEMU's during the invocation.\n\n",
		"| function | strategy | n | total ms | fetch ms | fetch MiB | major faults | minor faults | QEMU read MiB | daemon read MiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n",
		r.Breakdown, func(s BreakdownRow) string {
			return fmt.Sprintf("| %s | %s | %d | %.1f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f |\n", s.Function, s.Strategy, s.N, s.TotalMS,
				s.FetchMS, s.FetchMiB, s.MajorFaults, s.MinorFaults, s.QEMUMiB, s.DaemonMiB)
		}, nil)
	r.ablationMarkdown(&b)
	return b.String()
}

// Figure is one SVG file of a run.
type Figure struct {
	Name  string // file name
	Title string
	SVG   string
}

// Figures renders the run's plots: execution time per direction (bars,
// log scale), time against input ratio per function and against burst
// size per function and mode (lines).
func (r *EvalResult) Figures() []Figure {
	figs := r.execFigures()
	figs = append(figs, r.sizeFigures()...)
	figs = append(figs, r.burstFigures()...)
	if f, ok := r.ablationFigure(); ok {
		figs = append(figs, f)
	}
	return figs
}

// execFigures renders execution time per direction (record A / test B and
// the reverse): bars per function and strategy, log scale.
func (r *EvalResult) execFigures() []Figure {
	var figs []Figure
	o := r.order()
	for _, dir := range [][2]string{{"A", "B"}, {"B", "A"}} {
		var fns, ss []string
		for _, e := range r.Exec {
			if e.Record == dir[0] && e.Test == dir[1] {
				if !slices.Contains(fns, e.Function) {
					fns = append(fns, e.Function)
				}
				if !slices.Contains(ss, e.Strategy) {
					ss = append(ss, e.Strategy)
				}
			}
		}
		if len(fns) == 0 {
			continue
		}
		sort.SliceStable(ss, func(i, j int) bool { return rank(o.strategies, ss[i]) < rank(o.strategies, ss[j]) })
		c := bench.BarChart{Title: fmt.Sprintf("Execution time, record %s / test %s (median, p10–p90)", dir[0], dir[1]),
			YLabel: "total time (ms, log scale)", Groups: fns, Series: ss, LogY: true}
		for _, fn := range fns {
			v, lo, hi := nanRow(len(ss)), nanRow(len(ss)), nanRow(len(ss))
			for _, e := range r.Exec {
				if e.Record == dir[0] && e.Test == dir[1] && e.Function == fn {
					i := slices.Index(ss, e.Strategy)
					v[i], lo[i], hi[i] = e.Total.Median, e.Total.P10, e.Total.P90
				}
			}
			c.Values, c.Lo, c.Hi = append(c.Values, v), append(c.Lo, lo), append(c.Hi, hi)
		}
		figs = append(figs, Figure{Name: "exec-" + dir[0] + dir[1] + ".svg", Title: c.Title, SVG: c.SVG()})
	}
	return figs
}

// sizeFigures renders, per function, time against the test input's size
// relative to the recorded one, a line per strategy.
func (r *EvalResult) sizeFigures() []Figure {
	var figs []Figure
	var sizeFns []string
	for _, s := range r.Size {
		if !slices.Contains(sizeFns, s.Function) {
			sizeFns = append(sizeFns, s.Function)
		}
	}
	for _, fn := range sizeFns {
		f, ok := lineFigure("size-"+fn+".svg", "Input size: "+fn+" (record A, median)", "test input size / record input size",
			func(i int) bool { return r.Size[i].Function == fn }, func(i int) float64 { return r.Size[i].Ratio },
			func(i int) float64 { return r.Size[i].Total.Median }, func(i int) string { return r.Size[i].Strategy }, len(r.Size))
		if ok {
			figs = append(figs, f)
		}
	}
	return figs
}

// burstFigures renders, per function and snapshot mode, time against the
// burst's size, a line per strategy.
func (r *EvalResult) burstFigures() []Figure {
	var figs []Figure
	type fm struct{ fn, mode string }
	var bms []fm
	for _, s := range r.Burst {
		if !slices.Contains(bms, fm{s.Function, s.Mode}) {
			bms = append(bms, fm{s.Function, s.Mode})
		}
	}
	for _, k := range bms {
		f, ok := lineFigure("burst-"+k.fn+"-"+k.mode+".svg", fmt.Sprintf("Bursts: %s, %s snapshot(s) (mean per invocation, median over reps)", k.fn, k.mode),
			"concurrent cold invocations (burst size)",
			func(i int) bool { return r.Burst[i].Function == k.fn && r.Burst[i].Mode == k.mode },
			func(i int) float64 { return float64(r.Burst[i].Size) }, func(i int) float64 { return r.Burst[i].Mean.Median },
			func(i int) string { return r.Burst[i].Strategy }, len(r.Burst))
		if ok {
			figs = append(figs, f)
		}
	}
	return figs
}

// lineFigure plots the rows 0..n-1 that keep selects as lines of total time
// (log x axis), one per series name s(i); ok is false if none is kept.
func lineFigure(name, title, xl string, keep func(i int) bool, x func(i int) float64, y func(i int) float64, s func(i int) string, n int) (Figure, bool) {
	var ls []bench.Line
	for i := 0; i < n; i++ {
		if !keep(i) {
			continue
		}
		k := slices.IndexFunc(ls, func(l bench.Line) bool { return l.Name == s(i) })
		if k < 0 {
			ls = append(ls, bench.Line{Name: s(i)})
			k = len(ls) - 1
		}
		ls[k].X, ls[k].Y = append(ls[k].X, x(i)), append(ls[k].Y, y(i))
	}
	if len(ls) == 0 {
		return Figure{}, false
	}
	c := bench.LineChart{Title: title, XLabel: xl, YLabel: "total time (ms)", Series: ls, LogX: true}
	return Figure{Name: name, Title: title, SVG: c.SVG()}, true
}

func nanRow(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = math.NaN()
	}
	return out
}

// WriteEval writes a run into dir: eval.jsonl (one sample a line),
// eval.json (configuration, machine and summaries), eval.md (the tables
// and links to the figures) and one SVG per figure. It returns the paths.
func WriteEval(dir string, r *EvalResult) ([]string, error) {
	w, err := bench.WriteRun(dir, "eval", r.Samples, r)
	if err != nil {
		return nil, err
	}
	write := w.Write
	figs := r.Figures()
	var md strings.Builder
	md.WriteString("# Evaluation\n\nGenerated by `thaw bench` (experiments: " + strings.Join(r.Config.Experiments, ", ") + "). Raw samples: [eval.jsonl](eval.jsonl); summaries: [eval.json](eval.json).\n\n")
	md.WriteString(r.Markdown())
	if len(figs) > 0 {
		md.WriteString("## Figures\n\n")
		for _, f := range figs {
			fmt.Fprintf(&md, "![%s](%s)\n\n", f.Title, f.Name)
			if err := write(f.Name, []byte(f.SVG)); err != nil {
				return nil, err
			}
		}
	}
	if err := write("eval.md", []byte(md.String())); err != nil {
		return nil, err
	}
	return w.Paths, nil
}

// ReadEval reads a run written by WriteEval back from dir (eval.json and
// eval.jsonl) and recomputes its summaries from the samples, so tables and
// figures can be redrawn, or samples of several runs concatenated, without
// measuring again.
func ReadEval(dir string) (*EvalResult, error) {
	var r EvalResult
	if err := bench.ReadRun(dir, "eval", &r, &r.Samples); err != nil {
		return nil, err
	}
	return &r, nil
}
