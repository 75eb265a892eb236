package eval

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

func smp(exp, rec, tst, fn, s string, rep int, total float64) EvalSample {
	return EvalSample{Experiment: exp, Record: rec, Test: tst,
		StrategySample: bench.StrategySample{Function: fn, Strategy: s, Rep: rep, TotalMS: total}}
}

// synthetic is a small run: two functions in both directions with known
// medians, a size sweep, two bursts and breakdown fields.
func synthetic() *EvalResult {
	r := &EvalResult{When: time.Date(2026, 11, 22, 5, 0, 0, 0, time.UTC), DurationS: 61,
		Machine:     bench.Machine{Cores: 2, MemoryGiB: 24, CPU: "Xeon", Accel: "tcg", Disk: "vda (rotational)", Kernel: "6.18", QEMU: "7.2.22"},
		ReadaheadKB: 8192,
		Config: EvalConfig{Experiments: Experiments, Strategies: []string{"vanilla", "cached", "reap", "faasnap"},
			BreakdownFunctions: []string{"json"}, Reps: 3}}
	// Medians: hello vanilla 400, reap 200, faasnap 100, cached 100, warm 50;
	// json vanilla 900, reap 400, faasnap 100, cached 50, warm 25 (A→B).
	med := map[string]map[string]float64{
		"hello": {"vanilla": 400, "reap": 200, "faasnap": 100, "cached": 100, Warm: 50},
		"json":  {"vanilla": 900, "reap": 400, "faasnap": 100, "cached": 50, Warm: 25},
	}
	for _, dir := range [][2]string{{"A", "B"}, {"B", "A"}} {
		for fn, ms := range med {
			for s, m := range ms {
				for rep, d := range []float64{-10, 0, 10} {
					x := smp(ExpExec, dir[0], dir[1], fn, s, rep, m+d)
					x.MajorFaults, x.FetchMS, x.FetchBytes, x.ReadBytes = uint64(rep+1), 5, 2<<20, 1<<20
					r.Samples = append(r.Samples, x)
				}
			}
		}
	}
	for _, ratio := range []float64{2, 0.5, 1} {
		x := smp(ExpSize, "A", "B×"+bench.FormatRatio(ratio), "json", "vanilla", 0, 100*ratio)
		x.InputRatio = ratio
		r.Samples = append(r.Samples, x)
	}
	// Two repetitions of a burst of 2: means 150 and 250, maxima 200 and 300.
	for rep, totals := range [][]float64{{100, 200}, {200, 300}} {
		for slot, tot := range totals {
			x := smp(ExpBurst, "A", "B", "hello", "faasnap", rep, tot)
			x.Burst, x.BurstMode, x.Slot, x.WallMS = 2, BurstDifferent, slot, tot+10
			r.Samples = append(r.Samples, x)
		}
	}
	r.Summarize()
	return r
}

func TestEvalSummaries(t *testing.T) {
	r := synthetic()
	if len(r.Exec) != 2*2*5 {
		t.Fatalf("%d exec rows, want 20", len(r.Exec))
	}
	// Ordered: record A first, functions in Table 2 order, warm first.
	if e := r.Exec[0]; e.Record != "A" || e.Function != "hello" || e.Strategy != Warm || e.Total.Median != 50 || e.Total.N != 3 {
		t.Errorf("first row %+v", e)
	}
	if e := r.Exec[1]; e.Strategy != "vanilla" || e.Total.P10 != 392 || e.Total.P90 != 408 || e.MajorFaults != 2 || e.ReadMiB != 1 {
		t.Errorf("second row %+v", e)
	}
	got := map[string]float64{}
	for _, s := range r.Speedups {
		got[s.Direction+" "+s.Name] = s.Value
		if s.Functions != 2 && s.Direction != "both" || s.Direction == "both" && s.Functions != 4 {
			t.Errorf("%+v: wrong function count", s)
		}
	}
	want := map[string]float64{
		"A→B faasnap over vanilla":  6,                // sqrt(4 * 9)
		"A→B faasnap over reap":     2 * math.Sqrt2,   // sqrt(2 * 4)
		"A→B faasnap to cached":     math.Sqrt2,       // sqrt(1 * 2)
		"A→B faasnap to warm":       2 * math.Sqrt2,   // sqrt(2 * 4)
		"A→B reap over vanilla":     1.5 * math.Sqrt2, // sqrt(2 * 2.25)
		"both faasnap over vanilla": 6,
		"B→A faasnap to warm":       2 * math.Sqrt2,
	}
	for k, v := range want {
		if math.Abs(got[k]-v) > 1e-9 {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(r.Size) != 3 || r.Size[0].Ratio != 0.5 || r.Size[2].Ratio != 2 || r.Size[2].Total.Median != 200 {
		t.Errorf("size rows %+v", r.Size)
	}
	if len(r.Burst) != 1 {
		t.Fatalf("burst rows %+v", r.Burst)
	}
	b := r.Burst[0]
	if b.Size != 2 || b.Mode != BurstDifferent || b.Mean.Median != 200 || b.Mean.N != 2 || b.Max.Median != 250 || b.Wall.Median != 260 {
		t.Errorf("burst row %+v", b)
	}
	// Breakdown: json only, from exec's A→B samples, no warm.
	if len(r.Breakdown) != 4 {
		t.Fatalf("breakdown rows %+v", r.Breakdown)
	}
	for _, bd := range r.Breakdown {
		if bd.Function != "json" || bd.Strategy == Warm || bd.N != 3 || bd.FetchMS != 5 || bd.FetchMiB != 2 || bd.QEMUMiB != 1 {
			t.Errorf("breakdown row %+v", bd)
		}
	}
}

func TestEvalMarkdown(t *testing.T) {
	md := synthetic().Markdown()
	benchtest.WantAll(t, "Markdown", md,
		"2 cores (Xeon), 24 GiB memory, accelerator **tcg**, disk vda (rotational) with read_ahead_kb 8192",
		"## Execution time (Figures 6 and 7)",
		"| A→B | hello | warm | **50.0** | 42–58 |",
		"| faasnap over vanilla | A→B | **6.00** | 2 |",
		"| faasnap to warm | both | **2.83** | 4 |",
		"## Input size (Figure 8)", "| json | vanilla | 0.5 | **50.0** |",
		"## Bursts (Figure 10)", "| hello | different | 2 | faasnap | **200.0** | 160–240 | 250.0 | 260.0 |",
		"## Breakdown (Table 3)", "| json | faasnap | 3 | 100.0 | 5.0 | 2.0 |",
	)
}

func TestWriteEvalAndReadBack(t *testing.T) {
	r := synthetic()
	dir := t.TempDir()
	paths, err := WriteEval(dir, r)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	want := []string{"eval.jsonl", "eval.json", "exec-AB.svg", "exec-BA.svg", "size-json.svg", "burst-hello-different.svg", "eval.md"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("wrote %v, want %v", names, want)
	}
	back, err := bench.ReadSamples[EvalSample](filepath.Join(dir, "eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r.Samples) {
		t.Errorf("samples differ after a round trip through JSON lines")
	}
	md, _ := os.ReadFile(filepath.Join(dir, "eval.md"))
	if !bytes.Contains(md, []byte("![Execution time, record A / test B (median, p10–p90)](exec-AB.svg)")) {
		t.Errorf("eval.md does not link the figures:\n%s", md)
	}
	js, _ := os.ReadFile(filepath.Join(dir, "eval.json"))
	benchtest.WantAll(t, "eval.json", string(js), `"machine"`, `"readahead_kb": 8192`, `"speedups"`, `"burst"`)
	for _, f := range r.Figures() {
		benchtest.WellFormed(t, f.SVG)
	}
	again, err := ReadEval(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Markdown() != r.Markdown() {
		t.Errorf("re-summarized run differs:\n%s\nvs\n%s", again.Markdown(), r.Markdown())
	}
}

func TestEvalConfigResolve(t *testing.T) {
	c := DefaultEvalConfig(".")
	c.Functions = []string{"hello", "json"}
	if err := c.Resolve([]string{"vanilla", "cached", "reap", "faasnap", "snapbpf"}); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Strategies, []string{"vanilla", "cached", "reap", "faasnap", "snapbpf"}) {
		t.Errorf("strategies %v: want the daemon's", c.Strategies)
	}
	if !reflect.DeepEqual(c.ExecFunctions, []string{"hello", "json"}) || !reflect.DeepEqual(c.SizeFunctions, []string{"json"}) ||
		len(c.BreakdownFunctions) != 0 {
		t.Errorf("filtered: exec %v size %v breakdown %v", c.ExecFunctions, c.SizeFunctions, c.BreakdownFunctions)
	}
	for _, bad := range []func(*EvalConfig){
		func(c *EvalConfig) { c.Reps = 0 },
		func(c *EvalConfig) { c.Experiments = []string{"fig9"} },
		func(c *EvalConfig) { c.Strategies = []string{"premap"} },
		func(c *EvalConfig) { c.BurstModes = []string{"mixed"} },
		func(c *EvalConfig) { c.Ratios = []float64{64} },
		func(c *EvalConfig) { c.Functions = []string{"nope"} },
	} {
		c := DefaultEvalConfig(".")
		bad(&c)
		if err := c.Resolve([]string{"vanilla", "faasnap"}); err == nil {
			t.Errorf("config %+v accepted", c)
		}
	}
}

func TestEstimateAndProgress(t *testing.T) {
	c := DefaultEvalConfig(".")
	if err := c.Resolve([]string{"vanilla", "cached", "reap", "faasnap", "premap", "snapbpf"}); err != nil {
		t.Fatal(err)
	}
	e := EstimateEval(c)
	// 12 functions x 2 record inputs; size, burst and breakdown reuse A.
	if e.Prepares != 24 || e.Copies != 2*15 || e.Warm != 12*2*5 {
		t.Errorf("estimate %+v", e)
	}
	if wantCold := 12*2*6*5 + 4*5*6*5 + 2*2*31*6*5; e.Cold != wantCold {
		t.Errorf("cold starts %d, want %d", e.Cold, wantCold)
	}
	if e.Duration() < 30*time.Minute || e.Duration() > 12*time.Hour {
		t.Errorf("implausible estimate %s", e.Duration())
	}
	var buf bytes.Buffer
	p := NewProgress(&buf, Estimate{Seconds: 100})
	t0 := p.start
	p.now = func() time.Time { return t0.Add(30 * time.Second) }
	p.Done(25, "step %d", 1)
	if got := buf.String(); got != "[bench  25% 30s elapsed ~1m30s left] step 1\n" {
		t.Errorf("progress line %q", got)
	}
}

// The paging view takes the warm invocation's guest time out of every
// cold cell, phase by phase, and compares strategies on what is left.
func TestPagingView(t *testing.T) {
	r := &EvalResult{Config: EvalConfig{Experiments: []string{ExpExec}, Strategies: []string{"vanilla", "faasnap"}, Reps: 2}}
	add := func(fn, s string, total, setup, resume, invoke, guest, teardown float64) {
		for rep := range 2 {
			x := smp(ExpExec, "A", "B", fn, s, rep, total)
			x.SetupMS, x.ResumeMS, x.InvokeMS, x.GuestMS, x.TeardownMS = setup, resume, invoke, guest, teardown
			r.Samples = append(r.Samples, x)
		}
	}
	// hello: compute 100 ms (warm guest time); vanilla pays 300 ms beyond it,
	// faasnap 100 ms: 3× in the paging view, 2× on totals.
	add("hello", Warm, 102, 0, 0, 102, 100, 0)
	add("hello", "vanilla", 400, 60, 120, 220, 180, 4)
	add("hello", "faasnap", 200, 40, 30, 130, 110, 0)
	// json has no warm cell: it has no paging row.
	add("json", "vanilla", 500, 60, 120, 320, 300, 0)
	r.Summarize()
	if len(r.Paging) != 2 {
		t.Fatalf("paging rows %+v", r.Paging)
	}
	v := r.Paging[0]
	if v.Strategy != "vanilla" {
		v = r.Paging[1]
	}
	want := PagingRow{Record: "A", Test: "B", Function: "hello", Strategy: "vanilla", ComputeMS: 100, SetupMS: 60,
		ResumeMS: 120, InHandler: 120, Teardown: 4, PagingMS: 300, TotalMS: 400}
	if v != want {
		t.Fatalf("vanilla paging row\n got %+v\nwant %+v", v, want)
	}
	var total, paging float64
	for _, s := range r.Speedups {
		if s.Name == "faasnap over vanilla" && s.Direction == "A→B" {
			total = s.Value
		}
	}
	for _, s := range r.PagingSpeedups {
		if s.Name == "faasnap over vanilla" && s.Direction == "A→B" {
			paging = s.Value
		}
	}
	if math.Abs(total-2) > 1e-9 || math.Abs(paging-3) > 1e-9 {
		t.Fatalf("faasnap over vanilla: %.3f on totals (want 2), %.3f in the paging view (want 3)", total, paging)
	}
	md := r.Markdown()
	benchtest.WantAll(t, "markdown", md, "## Paging view", "| A→B | hello | vanilla | 100.0 | 60.0 | 120.0 | 120.0 | 4.0 | **300.0** | 400.0 |", "ratio (paging view)")
}
