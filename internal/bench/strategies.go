package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// FunctionCase is one function of a strategies run: where its code is, the
// guest memory it gets, the input it is prepared (recorded) with and the
// different input it is tested with (FaaSnap's "record A / test B").
type FunctionCase struct {
	Name        string          `json:"name"`
	Dir         string          `json:"dir"`
	MemoryMiB   int             `json:"memory_mib"`
	RecordEvent json.RawMessage `json:"record_event"`
	TestEvent   json.RawMessage `json:"test_event"`
	// Services the function's guests may reach (its Redis), host:port.
	Services []string `json:"services,omitempty"`
}

// createCase creates fc's function with the services it needs.
func createCase(ctx context.Context, c *client.Client, fc FunctionCase) error {
	var opts []client.FunctionOption
	if len(fc.Services) > 0 {
		opts = append(opts, client.WithServices(fc.Services...))
	}
	if _, err := c.CreateFunctionFromDir(ctx, fc.Name, fc.Dir, fc.MemoryMiB, 1, opts...); err != nil {
		return fmt.Errorf("create %s: %w", fc.Name, err)
	}
	return nil
}

// prepareCase creates fc's function if the daemon lacks it and prepares it
// (say reports the step).
func prepareCase(ctx context.Context, c *client.Client, fc FunctionCase, say func(string, ...any), step string) (*client.PrepareResult, error) {
	if _, err := c.GetFunction(ctx, fc.Name); err != nil {
		if err := createCase(ctx, c, fc); err != nil {
			return nil, err
		}
	}
	say("%s: %s", fc.Name, step)
	pr, err := c.Prepare(ctx, fc.Name, fc.RecordEvent, client.PrepareOptions{})
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w", fc.Name, err)
	}
	return pr, nil
}

// DefaultCases are hello and two functions whose working sets are tens of
// MB (numpy's matmul and PIL's image rotation), sized for TCG.
func DefaultCases(root string) []FunctionCase {
	return []FunctionCase{
		functionCase(root, "hello", 256, `{"name":"record"}`, `{"name":"test"}`),
		functionCase(root, "matmul", 512, `{"n":200,"seed":1}`, `{"n":256,"seed":2}`),
		functionCase(root, "image", 512, `{"size":512,"seed":1}`, `{"size":640,"seed":2}`),
	}
}

// functionCase is the case of the function of the repository at root
// named fn, with a guest of memoryMiB, recorded with the event record
// and tested with test.
func functionCase(root, fn string, memoryMiB int, record, test string) FunctionCase {
	return FunctionCase{Name: fn, Dir: filepath.Join(root, "functions", fn), MemoryMiB: memoryMiB,
		RecordEvent: json.RawMessage(record), TestEvent: json.RawMessage(test)}
}

// StrategySample is one cold invocation (one JSON line).
type StrategySample struct {
	Function    string  `json:"function"`
	Strategy    string  `json:"strategy"`
	Rep         int     `json:"rep"`
	TotalMS     float64 `json:"total_ms"`
	SetupMS     float64 `json:"setup_ms"`
	ResumeMS    float64 `json:"resume_ms"`
	InvokeMS    float64 `json:"invoke_ms"`
	GuestMS     float64 `json:"guest_ms"`
	TeardownMS  float64 `json:"teardown_ms,omitempty"` // after the answer; not part of total
	MajorFaults uint64  `json:"major_faults"`
	MinorFaults uint64  `json:"minor_faults"`
	ReadBytes   uint64  `json:"read_bytes"`        // by QEMU, from storage
	DaemonBytes uint64  `json:"daemon_read_bytes"` // by the daemon for the strategy (prefetch, uffd faults, loader)
	// Stats are the strategy's own stats, under its names (the part of
	// the invocation's strategy_stats under its kind).
	Stats map[string]any `json:"stats,omitempty"`
}

// legacyStats are the strategies' own fields a sample carried at its top
// level before they moved into Stats, by their names there.
var legacyStats = map[string]string{"prefetch_pages": "prefetch_pages", "prefetch_ms": "prefetch_ms", "uffd_faults": "faults_served",
	"loader_bytes": "loader_bytes", "loader_ms": "loader_ms", "loader_finished_first": "loader_finished_first", "cache_fill_ms": "cache_fill_ms"}

// fromLegacy fills Stats from raw, a sample written before Stats existed
// (results of earlier runs read again).
func (s *StrategySample) fromLegacy(raw json.RawMessage) {
	var top map[string]any
	if s.Stats != nil || json.Unmarshal(raw, &top) != nil {
		return
	}
	for old, name := range legacyStats {
		if v, ok := top[old]; ok {
			if s.Stats == nil {
				s.Stats = map[string]any{}
			}
			s.Stats[name] = v
		}
	}
}

// StatNum is the strategy's stat name of s as a number (0 without it).
func (s StrategySample) StatNum(name string) float64 {
	f, _ := s.Stats[name].(float64)
	return f
}

// StrategiesResult is a whole run.
type StrategiesResult struct {
	Machine    Machine                    `json:"machine"`
	When       time.Time                  `json:"when"`
	Reps       int                        `json:"reps"`
	Strategies []string                   `json:"strategies"`
	Cases      []FunctionCase             `json:"cases"`
	Prepared   map[string]json.RawMessage `json:"prepared"` // function -> prepare result
	Samples    []StrategySample           `json:"samples"`
	Cells      map[string]map[string]Cell `json:"cells"` // function -> strategy -> cell
	Speedups   map[string]float64         `json:"speedups"`
	// ReadaheadKB is the data disk's read_ahead_kb during the run.
	ReadaheadKB int `json:"readahead_kb"`
}

// Cell summarizes one function under one strategy.
type Cell struct {
	Total       Summary `json:"total_ms"`
	Setup       Summary `json:"setup_ms"`
	Resume      Summary `json:"resume_ms"`
	Invoke      Summary `json:"invoke_ms"`
	MajorFaults float64 `json:"major_faults_median"`
	MinorFaults float64 `json:"minor_faults_median"`
	ReadMiB     float64 `json:"read_mib_median"`        // by QEMU
	DaemonMiB   float64 `json:"daemon_read_mib_median"` // by the daemon for the strategy
}

// RunStrategies prepares every case, then cold-invokes it under every
// strategy reps times, evicting the snapshot's files from the page cache
// before each invocation. The order of strategies rotates every repetition
// so slow drift of the machine spreads over all of them.
func RunStrategies(ctx context.Context, c *client.Client, cases []FunctionCase, strategies []string, reps int, progress io.Writer) (*StrategiesResult, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	say := func(f string, a ...any) { fmt.Fprintf(progress, "[bench strategies] "+f+"\n", a...) }
	res := &StrategiesResult{Machine: DescribeMachine(info), When: time.Now().UTC(), Reps: reps,
		Strategies: strategies, Cases: cases, Prepared: map[string]json.RawMessage{}}
	total := len(cases) * len(strategies) * reps
	done := 0
	for _, fc := range cases {
		pr, err := prepareCase(ctx, c, fc, say, "prepare (boot, clean snapshot, record, warm snapshot, artifacts)")
		if err != nil {
			return nil, err
		}
		b, _ := json.Marshal(pr)
		res.Prepared[fc.Name] = b
		if s := StoreUsers(info, strategies); len(s) > 0 { // they map the snapshot from the memory store
			if _, err := c.StoreSnapshot(ctx, pr.Warm.ID); err != nil {
				return nil, fmt.Errorf("store %s for %s: %w", pr.Warm.ID, strings.Join(s, ", "), err)
			}
		}
		for rep := 0; rep < reps; rep++ {
			for i := range strategies {
				s := strategies[(i+rep)%len(strategies)]
				inv, err := c.InvokeFunction(ctx, fc.Name, fc.TestEvent,
					client.InvokeOptions{Strategy: s, Snapshot: pr.Warm.ID, EvictCache: true})
				if err != nil {
					return nil, fmt.Errorf("%s/%s: %w", fc.Name, s, err)
				}
				if !inv.OK {
					return nil, fmt.Errorf("%s/%s: function raised %s: %s", fc.Name, s, inv.Error.Type, inv.Error.Message)
				}
				if inv.Strategy != s {
					return nil, fmt.Errorf("%s/%s ran as %s: %s", fc.Name, s, inv.Strategy, inv.StrategyStats.Fallback)
				}
				smp := SampleOf(fc.Name, s, rep, inv)
				res.Samples = append(res.Samples, smp)
				done++
				say("%3d/%d %-8s %-8s total %7.1f ms (setup %6.1f, resume %7.1f, invoke %7.1f), %d major faults",
					done, total, fc.Name, s, smp.TotalMS, smp.SetupMS, smp.ResumeMS, smp.InvokeMS, smp.MajorFaults)
			}
		}
	}
	res.summarize()
	return res, nil
}

// SampleOf is the sample of one invocation of function fn with strategy s.
func SampleOf(fn, s string, rep int, inv *client.Invocation) StrategySample {
	smp := StrategySample{Function: fn, Strategy: s, Rep: rep, TotalMS: inv.Timing.TotalMS,
		InvokeMS: inv.Timing.InvokeMS, GuestMS: inv.Timing.GuestMS, TeardownMS: inv.Timing.TeardownMS}
	if r := inv.Timing.Restore; r != nil {
		smp.SetupMS, smp.ResumeMS = r.SetupMS, r.ResumeMS
	}
	if p := inv.Process; p != nil {
		smp.MajorFaults, smp.MinorFaults, smp.ReadBytes = p.MajorFaults, p.MinorFaults, p.ReadBytes
	}
	if st := inv.StrategyStats; st != nil {
		smp.DaemonBytes, smp.Stats = st.DaemonReadBytes, st.PartValues()
	}
	return smp
}

func (r *StrategiesResult) summarize() {
	type key struct{ fn, s string }
	cols := map[key][]StrategySample{}
	for _, s := range r.Samples {
		cols[key{s.Function, s.Strategy}] = append(cols[key{s.Function, s.Strategy}], s)
	}
	r.Cells = map[string]map[string]Cell{}
	for k, ss := range cols {
		pick := func(f func(StrategySample) float64) []float64 {
			out := make([]float64, len(ss))
			for i, s := range ss {
				out[i] = f(s)
			}
			return out
		}
		cell := Cell{
			Total:       Summarize(pick(func(s StrategySample) float64 { return s.TotalMS })),
			Setup:       Summarize(pick(func(s StrategySample) float64 { return s.SetupMS })),
			Resume:      Summarize(pick(func(s StrategySample) float64 { return s.ResumeMS })),
			Invoke:      Summarize(pick(func(s StrategySample) float64 { return s.InvokeMS })),
			MajorFaults: Summarize(pick(func(s StrategySample) float64 { return float64(s.MajorFaults) })).Median,
			MinorFaults: Summarize(pick(func(s StrategySample) float64 { return float64(s.MinorFaults) })).Median,
			ReadMiB:     Summarize(pick(func(s StrategySample) float64 { return float64(s.ReadBytes) / (1 << 20) })).Median,
			DaemonMiB:   Summarize(pick(func(s StrategySample) float64 { return float64(s.DaemonBytes) / (1 << 20) })).Median,
		}
		if r.Cells[k.fn] == nil {
			r.Cells[k.fn] = map[string]Cell{}
		}
		r.Cells[k.fn][k.s] = cell
	}
	// Geometric-mean ratios of median totals across functions (FaaSnap's
	// headline numbers are of this form).
	ratio := func(num, den string) float64 {
		var xs []float64
		for _, cells := range r.Cells {
			a, okA := cells[num]
			b, okB := cells[den]
			if okA && okB && a.Total.Median > 0 {
				xs = append(xs, b.Total.Median/a.Total.Median)
			}
		}
		return GeoMean(xs)
	}
	r.Speedups = map[string]float64{}
	for _, p := range [][2]string{{"faasnap", "vanilla"}, {"faasnap", "reap"}, {"reap", "vanilla"}, {"cached", "faasnap"}} {
		if v := ratio(p[0], p[1]); !math.IsNaN(v) {
			r.Speedups[p[0]+"_over_"+p[1]] = v
		}
	}
}

// Markdown renders the run as tables.
func (r *StrategiesResult) Markdown() string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d cores, %d GiB, %s, kernel %s, disk %s (read_ahead_kb %d); QEMU %s, accelerator **%s**, %s. %s. %d repetitions, cold (snapshot files evicted from the page cache before every invocation), medians with p10–p90. Reads: QEMU's from storage, and the daemon's for the strategy (REAP prefetch and faults, FaaSnap loader).\n\n",
		m.Cores, m.MemoryGiB, m.CPU, m.Kernel, m.Disk, r.ReadaheadKB, m.QEMU, m.Accel, m.HintText(), r.When.Format("2006-01-02 15:04 UTC"), r.Reps)
	fns := make([]string, 0, len(r.Cells))
	for fn := range r.Cells {
		fns = append(fns, fn)
	}
	sort.Strings(fns)
	b.WriteString("| function | strategy | total ms | p10–p90 | setup ms | resume ms | invoke ms | major faults | minor faults | QEMU read MiB | daemon read MiB |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, fn := range fns {
		for _, s := range r.Strategies {
			c, ok := r.Cells[fn][s]
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | **%.1f** | %.1f–%.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.1f | %.1f |\n", fn, s,
				c.Total.Median, c.Total.P10, c.Total.P90, c.Setup.Median, c.Resume.Median, c.Invoke.Median,
				c.MajorFaults, c.MinorFaults, c.ReadMiB, c.DaemonMiB)
		}
	}
	if len(r.Speedups) > 0 {
		b.WriteString("\nGeometric mean over functions of the ratio of median totals:\n\n")
		keys := make([]string, 0, len(r.Speedups))
		for k := range r.Speedups {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "- %s: %.2f×\n", strings.ReplaceAll(k, "_", " "), r.Speedups[k])
		}
	}
	return b.String()
}
