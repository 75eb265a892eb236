package fresh

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/internal/bench"
)

// Row summarizes one function, mode and concurrency: the requests served
// as the mode expects (Served of All; the others, a miss in a hit's burst
// for one, are left out of the times).
type Row struct {
	Function    string        `json:"function"`
	Mode        string        `json:"mode"`
	Concurrency int           `json:"concurrency"`
	Served      int           `json:"served"`
	All         int           `json:"all"`
	Client      bench.Summary `json:"client_ms"`
	Total       bench.Summary `json:"total_ms"`
}

// Rows summarizes samples, by function, mode (in Modes' order) and
// concurrency.
func Rows(samples []Sample) []Row {
	type key struct {
		fn, mode string
		n        int
	}
	groups := map[key][]Sample{}
	var keys []key
	for _, s := range samples {
		k := key{s.Function, s.Mode, s.Concurrency}
		if groups[k] == nil {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], s)
	}
	slices.SortStableFunc(keys, func(a, b key) int {
		if a.fn != b.fn {
			return strings.Compare(a.fn, b.fn)
		}
		if a.n != b.n {
			return a.n - b.n
		}
		return slices.Index(Modes, a.mode) - slices.Index(Modes, b.mode)
	})
	var rows []Row
	for _, k := range keys {
		var client, total []float64
		for _, s := range groups[k] {
			if s.Served == servedAs[k.mode] {
				client, total = append(client, s.ClientMS), append(total, s.TotalMS)
			}
		}
		rows = append(rows, Row{Function: k.fn, Mode: k.mode, Concurrency: k.n, Served: len(client), All: len(groups[k]),
			Client: bench.Summarize(client), Total: bench.Summarize(total)})
	}
	return rows
}

// Resummarize computes the rows and the traces' summaries again (a result
// read back from its JSON).
func (r *Result) Resummarize() {
	r.Rows = Rows(r.Samples)
	for i := range r.Traces {
		r.Traces[i].Summarize()
	}
}

// Markdown is the run's report.
func (r *Result) Markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("## Ready clones: fresh VMs per request\n\n")
	p("Functions %s; concurrency %s; %d bursts per mode and concurrency. Machine: %d cores, %s, %s (%s), QEMU %s; %s.\n\n",
		strings.Join(r.Functions, ", "), joinInts(r.Concurrency), r.Rounds, r.Machine.Cores, r.Machine.CPU, r.Machine.Kernel,
		r.Machine.Accel, r.Machine.QEMU, r.When.Format("2006-01-02 15:04 UTC"))
	p("Request to answer as the client sees it (client) and as the daemon reports it (total), ms; " +
		"served: the requests the mode's path served, of those sent (a hit's burst may outrun the clones kept).\n\n")
	p("| function | concurrency | mode | served | client p50 | client p90 | total p50 | total p90 |\n")
	p("|---|---:|---|---:|---:|---:|---:|---:|\n")
	for _, row := range r.Rows {
		p("| %s | %d | %s | %d/%d | %s | %s | %s | %s |\n", row.Function, row.Concurrency, row.Mode, row.Served, row.All,
			fmtMS(row.Client.Median, row.Served), fmtMS(row.Client.P90, row.Served), fmtMS(row.Total.Median, row.Served), fmtMS(row.Total.P90, row.Served))
	}
	r.memoryMarkdown(p)
	if len(r.Traces) > 0 {
		p("\n### Trace\n\n| function | trace | requests | hit rate | mean ready clones | mean MiB counted against --standby-memory | mean concurrent demand |\n")
		p("|---|---|---:|---:|---:|---:|---:|\n")
		for _, t := range r.Traces {
			mib := "-" // the daemon gave no figure
			if t.MeanReadyMiB > 0 || t.MeanReady == 0 {
				mib = fmt.Sprintf("%.0f", t.MeanReadyMiB)
			}
			p("| %s | %s | %d | %.0f%% | %.2f | %s | %.2f |\n", t.Function, traceText(t.Trace), t.Served+t.Errors, t.HitRate*100,
				t.MeanReady, mib, t.MeanDemand)
		}
	}
	return b.String()
}

// memoryMarkdown writes the clones' memory and the refills.
func (r *Result) memoryMarkdown(p func(string, ...any)) {
	byFn := map[string][]CloneMemory{}
	for _, m := range r.Memory {
		byFn[m.Function] = append(byFn[m.Function], m)
	}
	p("\n### Memory per ready clone and refills\n\n")
	p("Counted: the MiB the daemon charges a ready clone against --standby-memory (its VMM's PSS measured once ready, " +
		"rounded up; as the VM listing's ready_memory_mib gives it), mean over the clones measured. " +
		"Refill: from a burst's first take to N ready clones again, none of them one it took.\n\n")
	p("| function | clones measured | counted MiB | VMM RSS MiB | PSS MiB | anonymous MiB | refill of N clones, p50 s (N: clones/s) |\n")
	p("|---|---:|---:|---:|---:|---:|---|\n")
	for _, fn := range r.Functions {
		ms := byFn[fn]
		var rss, pss, anon, counted []float64
		for _, m := range ms {
			rss, pss, anon = append(rss, m.RSSMiB), append(pss, m.PSSMiB), append(anon, m.AnonMiB)
			if m.CountedMiB > 0 {
				counted = append(counted, float64(m.CountedMiB))
			}
		}
		count := "-" // the daemon gave no figure
		if len(counted) > 0 {
			count = fmt.Sprintf("%.0f", bench.Summarize(counted).Mean)
		}
		var refills []string
		for _, n := range r.Concurrency {
			if s := r.refillOf(fn, n); s.N > 0 {
				refills = append(refills, fmt.Sprintf("%d: %.2f s (%.2f/s)", n, s.Median/1000, float64(n)/(s.Median/1000)))
			}
		}
		p("| %s | %d | %s | %.0f | %.0f | %.0f | %s |\n", fn, len(ms), count, bench.Summarize(rss).Mean, bench.Summarize(pss).Mean,
			bench.Summarize(anon).Mean, strings.Join(refills, "; "))
	}
}

// refillOf summarizes fn's refills of n clones.
func (r *Result) refillOf(fn string, n int) bench.Summary {
	var xs []float64
	for _, f := range r.Refills {
		if f.Function == fn && f.Concurrency == n {
			xs = append(xs, f.MS)
		}
	}
	return bench.Summarize(xs)
}

func fmtMS(v float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func joinInts(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ", ")
}

func traceText(t TraceConfig) string {
	return fmt.Sprintf("%.0f s, %.1f/s Poisson, bursts of %d every %.0f s, seed %d", t.Seconds, t.Rate, t.BurstSize, t.BurstEvery, t.Seed)
}

// Figures are the run's plots: p50 request to answer per mode and
// concurrency (one per function), and each trace's ready clones over time.
func (r *Result) Figures() map[string]string {
	out := map[string]string{}
	for _, fn := range r.Functions {
		c := bench.BarChart{Title: fn + ": request to answer, p50 (client)", YLabel: "ms", Series: Modes, LogY: true}
		for _, n := range r.Concurrency {
			c.Groups = append(c.Groups, fmt.Sprintf("concurrency %d", n))
			vals := make([]float64, len(Modes))
			for i, m := range Modes {
				vals[i] = math.NaN()
				for _, row := range r.Rows {
					if row.Function == fn && row.Concurrency == n && row.Mode == m && row.Served > 0 {
						vals[i] = row.Client.Median
					}
				}
			}
			c.Values = append(c.Values, vals)
		}
		out["fresh-"+fn+"-latency.svg"] = c.SVG()
	}
	for _, t := range r.Traces {
		var x, y, qx, qy []float64
		for _, s := range t.Ready {
			x, y = append(x, s.AtMS/1000), append(y, float64(s.Clones))
		}
		hits, all := 0, 0
		for _, q := range t.Requests {
			all++
			if q.Served == "ready" {
				hits++
			}
			qx, qy = append(qx, q.AtMS/1000), append(qy, float64(hits)/float64(all)*10)
		}
		lc := bench.LineChart{Title: fmt.Sprintf("%s: ready clones during the trace (hit rate %.0f%%)", t.Function, t.HitRate*100),
			XLabel: "s", YLabel: "ready clones; hit rate so far (x10)",
			Series: []bench.Line{{Name: "ready clones", X: x, Y: y}, {Name: "hit rate x10", X: qx, Y: qy}}}
		out["fresh-"+t.Function+"-trace.svg"] = lc.SVG()
	}
	return out
}
