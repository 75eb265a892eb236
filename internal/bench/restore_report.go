package bench

import (
	"fmt"
	"math"
	"strings"
)

// RestoreGroup summarizes the cold starts of one strategy, pool mode and
// concurrency. Only the cold starts that are what the mode says (served by
// a pooled VMM for a hit, by a started one for a miss) are in the
// summaries; the others are counted.
type RestoreGroup struct {
	Strategy    string `json:"strategy"`
	Pool        string `json:"pool"`
	Concurrency int    `json:"concurrency"`
	Samples     int    `json:"samples"`  // cold starts attempted
	Failed      int    `json:"failed"`   // errors, 429s included
	TooMany     int    `json:"too_many"` // refused by admission (429)
	// Mismatched are answers whose VMM was not the mode's: a hit asked
	// for that started its VMM, or a miss that found a pooled one.
	Mismatched int `json:"mismatched"`
	// Summaries: setup_ms, resume_ms, total_ms, qemu_cpu_ms, daemon_cpu_ms,
	// cpu_ms (QEMU plus daemon, per cold start; only where both were
	// measured) and, for hits, standby_cpu_ms.
	Summaries map[string]Summary `json:"summaries"`
}

// Restore summary rows, in the table's order.
const (
	RowSetup      = "setup_ms"
	RowResume     = "resume_ms"
	RowTotal      = "total_ms"
	RowQEMUCPU    = "qemu_cpu_ms"
	RowDaemonCPU  = "daemon_cpu_ms"
	RowCPU        = "cpu_ms"
	RowStandbyCPU = "standby_cpu_ms"
)

// Summarize recomputes the groups from the samples, in the configuration's
// order: misses, then hits; strategies; concurrency.
func (r *RestoreResult) Summarize() {
	r.Groups = nil
	for _, pool := range []string{PoolMiss, PoolHit} {
		for _, s := range r.Config.Strategies {
			for _, n := range r.Config.Concurrency {
				if g, ok := summarizeRestore(r.Samples, s, pool, n); ok {
					r.Groups = append(r.Groups, g)
				}
			}
		}
	}
}

// summarizeRestore summarizes one group; false if it has no sample.
func summarizeRestore(samples []RestoreSample, strategy, pool string, n int) (RestoreGroup, bool) {
	g := RestoreGroup{Strategy: strategy, Pool: pool, Concurrency: n, Summaries: map[string]Summary{}}
	cols := map[string][]float64{}
	for _, s := range samples {
		if s.Strategy != strategy || s.Pool != pool || s.Concurrency != n {
			continue
		}
		g.Samples++
		switch {
		case s.Error != "":
			g.Failed++
			if s.TooMany {
				g.TooMany++
			}
			continue
		case s.Hit() != (pool == PoolHit):
			g.Mismatched++
			continue
		}
		cols[RowSetup] = append(cols[RowSetup], s.SetupMS)
		cols[RowResume] = append(cols[RowResume], s.ResumeMS)
		cols[RowTotal] = append(cols[RowTotal], s.TotalMS)
		if s.QEMUCPUMS != nil {
			cols[RowQEMUCPU] = append(cols[RowQEMUCPU], *s.QEMUCPUMS)
		}
		if s.DaemonCPUMS != nil {
			cols[RowDaemonCPU] = append(cols[RowDaemonCPU], *s.DaemonCPUMS)
		}
		if s.QEMUCPUMS != nil && s.DaemonCPUMS != nil {
			cols[RowCPU] = append(cols[RowCPU], *s.QEMUCPUMS+*s.DaemonCPUMS)
		}
		if s.StandbyCPUMS != nil {
			cols[RowStandbyCPU] = append(cols[RowStandbyCPU], *s.StandbyCPUMS)
		}
	}
	for k, v := range cols {
		g.Summaries[k] = Summarize(v)
	}
	return g, g.Samples > 0
}

// Group finds a group's summary.
func (r *RestoreResult) Group(strategy, pool string, n int) (RestoreGroup, bool) {
	for _, g := range r.Groups {
		if g.Strategy == strategy && g.Pool == pool && g.Concurrency == n {
			return g, true
		}
	}
	return RestoreGroup{}, false
}

// cell is "median (p10–p90)" of a summary, or "unmeasured".
func cell(g RestoreGroup, row string) string {
	s, ok := g.Summaries[row]
	if !ok || s.N == 0 {
		return "unmeasured"
	}
	return fmt.Sprintf("%.1f (%.1f–%.1f)", s.Median, s.P10, s.P90)
}

// Markdown renders the machine, the method and one table row per group.
func (r *RestoreResult) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores, %d GiB, %s, kernel %s, disk %s; QEMU %s, accelerator **%s**, %s. %s.\n\n",
		m.Cores, m.MemoryGiB, m.CPU, m.Kernel, m.Disk, m.QEMU, m.Accel, m.HintText(), r.When.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Function `%s`, %d MiB guest; N concurrent cold invocations per burst, %d repetitions. "+
		"**miss**: the function has no VMM pool, every restore starts its VMM. **hit**: the function's pool holds N and "+
		"the burst starts once N standby VMs are listed; only answers saying `vmm: pooled` count as hits. "+
		"Page cache not evicted. Cells: median (p10–p90), ms. CPU is user+system time (10 ms ticks): QEMU's from the request "+
		"to the answer (a pooled VMM's CPU before the request is the standby column), thawd's over the burst divided by its "+
		"cold starts; CPU total = QEMU + daemon.\n\n", r.Config.Function, r.Config.MemoryMiB, r.Config.Reps)
	b.WriteString("| strategy | pool | N | ok/n | set-up | resume | total | QEMU CPU | daemon CPU | CPU total | standby VMM CPU | notes |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, g := range r.Groups {
		ok := g.Samples - g.Failed - g.Mismatched
		standby := "–"
		if g.Pool == PoolHit {
			standby = cell(g, RowStandbyCPU)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d/%d | %s | %s | %s | %s | %s | %s | %s | %s |\n", g.Strategy, g.Pool, g.Concurrency,
			ok, g.Samples, cell(g, RowSetup), cell(g, RowResume), cell(g, RowTotal), cell(g, RowQEMUCPU), cell(g, RowDaemonCPU),
			cell(g, RowCPU), standby, groupNotes(g))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\nNote: %s\n", n)
	}
	return b.String()
}

// groupNotes says what is not in a group's summaries.
func groupNotes(g RestoreGroup) string {
	var notes []string
	if g.TooMany > 0 {
		notes = append(notes, fmt.Sprintf("%d refused (429)", g.TooMany))
	}
	if f := g.Failed - g.TooMany; f > 0 {
		notes = append(notes, fmt.Sprintf("%d failed", f))
	}
	if g.Mismatched > 0 {
		if g.Pool == PoolHit {
			notes = append(notes, fmt.Sprintf("%d not pooled (excluded)", g.Mismatched))
		} else {
			notes = append(notes, fmt.Sprintf("%d pooled (excluded)", g.Mismatched))
		}
	}
	return strings.Join(notes, "; ")
}

// Figures are two bar charts: set-up, and host CPU per cold start, for
// every strategy and concurrency, miss beside hit, whiskers p10–p90.
func (r *RestoreResult) Figures() map[string]string {
	var groups []string
	for _, s := range r.Config.Strategies {
		for _, n := range r.Config.Concurrency {
			groups = append(groups, fmt.Sprintf("%s N=%d", s, n))
		}
	}
	chart := func(title, ylabel, row string) string {
		c := BarChart{Title: title, YLabel: ylabel, Groups: groups, Series: []string{"miss", "hit"}}
		for _, s := range r.Config.Strategies {
			for _, n := range r.Config.Concurrency {
				var v, lo, hi []float64
				for _, pool := range []string{PoolMiss, PoolHit} {
					g, _ := r.Group(s, pool, n)
					sm, ok := g.Summaries[row]
					if !ok || sm.N == 0 {
						v, lo, hi = append(v, math.NaN()), append(lo, math.NaN()), append(hi, math.NaN())
						continue
					}
					v, lo, hi = append(v, sm.Median), append(lo, sm.P10), append(hi, sm.P90)
				}
				c.Values, c.Lo, c.Hi = append(c.Values, v), append(c.Lo, lo), append(c.Hi, hi)
			}
		}
		return c.SVG()
	}
	return map[string]string{
		"restore-setup.svg": chart("Restore set-up: VMM pool miss and hit ("+r.Config.Function+")", "set-up (ms), median, p10–p90", RowSetup),
		"restore-cpu.svg":   chart("Host CPU per cold start: QEMU + thawd ("+r.Config.Function+")", "CPU (ms), median, p10–p90", RowCPU),
	}
}

// WriteRestore writes DIR/restore.jsonl (samples), restore.json (the
// configuration, machine and groups), restore.md and the figures; it
// returns the paths written.
func WriteRestore(dir string, r *RestoreResult) ([]string, error) {
	w, err := WriteRun(dir, "restore", r.Samples, r)
	if err != nil {
		return nil, err
	}
	write := w.Write
	md := "# Restore: VMM pool miss and hit\n\nGenerated by `thaw bench restore`. Raw samples: [restore.jsonl](restore.jsonl); summaries: [restore.json](restore.json).\n\n" +
		r.Markdown() + "\n![set-up](restore-setup.svg)\n\n![CPU per cold start](restore-cpu.svg)\n"
	if err := write("restore.md", []byte(md)); err != nil {
		return nil, err
	}
	for name, svg := range r.Figures() {
		if err := write(name, []byte(svg)); err != nil {
			return nil, err
		}
	}
	return w.Paths, nil
}

// ReadRestore reads a run written by WriteRestore and summarizes its
// samples again.
func ReadRestore(dir string) (*RestoreResult, error) {
	var r RestoreResult
	if err := ReadRun(dir, "restore", &r, &r.Samples); err != nil {
		return nil, err
	}
	return &r, nil
}
