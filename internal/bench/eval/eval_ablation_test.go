package eval

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

// syntheticAblation: image under Figure 9's steps and the techniques off,
// hello under the techniques off, three repetitions each with known
// medians, traced counters, and warm guest times for the paging view.
func syntheticAblation() *EvalResult {
	cfg := DefaultEvalConfig(".")
	cfg.Experiments, cfg.Reps = []string{ExpAblation}, 3
	r := &EvalResult{Config: cfg, ReadaheadKB: 128}
	med := map[string]float64{"vanilla": 900, "faasnap/concurrent": 700, "faasnap/no-loadingset": 500, "faasnap": 400,
		"faasnap/no-hostrec": 480, "faasnap/no-freed": 420, "faasnap/no-merge": 440}
	for _, fn := range []string{"image", "hello"} {
		for _, a := range cfg.ablationArms(fn) {
			for rep, d := range []float64{-10, 0, 10} {
				x := smp(ExpAblation, "A", "B", fn, a.Strategy, rep, med[a.Label()]+d)
				x.Variant, x.MajorFaults, x.Stats = a.Variant, uint64(10*rep), map[string]any{"loader_bytes": float64(4 << 20)}
				x.Trace = &client.FaultTrace{VMMFaults: 100, VMMReadRequests: uint64(rep), VMMBlockedMS: med[a.Label()] / 10}
				r.Samples = append(r.Samples, x)
			}
		}
		for rep := range 3 {
			x := smp(ExpAblation, "A", "B", fn, Warm, rep, 60)
			x.GuestMS = 50
			r.Samples = append(r.Samples, x)
		}
	}
	r.Summarize()
	return r
}

func TestAblationRows(t *testing.T) {
	r := syntheticAblation()
	if len(r.Ablation) != 7+5 {
		t.Fatalf("%d ablation rows, want 12", len(r.Ablation))
	}
	// Table 2 order (hello first); Figure 9's steps first, in the paper's order.
	var got []string
	for _, row := range r.Ablation {
		got = append(got, row.Function+" "+row.Arm.Label())
	}
	want := []string{"hello faasnap", "hello faasnap/no-loadingset", "hello faasnap/no-hostrec", "hello faasnap/no-freed", "hello faasnap/no-merge",
		"image vanilla", "image faasnap/concurrent", "image faasnap/no-loadingset", "image faasnap",
		"image faasnap/no-hostrec", "image faasnap/no-freed", "image faasnap/no-merge"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("rows\n%v\nwant\n%v", got, want)
	}
	v := r.Ablation[5] // image vanilla
	if v.N != 3 || v.Total.Median != 900 || v.PagingMS != 850 || v.VsFaaSnap != 900.0/400 || v.MajorFaults != 10 ||
		v.LoaderMiB != 4 || !v.Traced || v.VMMReadRequests != 1 || v.VMMBlockedMS != 90 || v.VMMFaults != 100 {
		t.Errorf("image vanilla row %+v", v)
	}
	md := r.Markdown()
	benchtest.WantAll(t, "markdown", md, "## Optimization steps (Figure 9, `image`)", "| faasnap/concurrent | 3 | **700.0** |",
		"## Techniques off", "| hello | faasnap/no-merge | 3 | **440.0** | 432–448 | 1.10 |", "blocked ms")
	if strings.Contains(md, "| image | vanilla |") {
		t.Errorf("the technique-off table lists Figure 9's steps:\n%s", md)
	}
}

// TestAblationUntraced: without the daemon's tracer, no traced columns and
// a note saying why; without warm samples, no paging time.
func TestAblationUntraced(t *testing.T) {
	r := syntheticAblation()
	var keep []EvalSample
	for _, s := range r.Samples {
		if s.Strategy != Warm {
			s.Trace = nil
			keep = append(keep, s)
		}
	}
	r.Samples = keep
	r.Summarize()
	if r.Ablation[0].Traced || !math.IsNaN(r.Ablation[0].PagingMS) {
		t.Errorf("row %+v: traced or with paging time", r.Ablation[0])
	}
	md := r.Markdown()
	if !strings.Contains(md, "without --fault-trace-object") || strings.Contains(md, "blocked ms") {
		t.Errorf("untraced markdown:\n%s", md)
	}
}

func TestAblationWriteAndReadBack(t *testing.T) {
	r := syntheticAblation()
	dir := t.TempDir()
	if _, err := WriteEval(dir, r); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ablation-steps.svg")); err != nil {
		t.Errorf("no Figure 9 plot: %v", err)
	}
	back, err := bench.ReadSamples[EvalSample](filepath.Join(dir, "eval.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r.Samples) {
		t.Errorf("variant or trace lost in the JSON lines")
	}
	again, err := ReadEval(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.Markdown() != r.Markdown() {
		t.Errorf("re-summarized run differs")
	}
}

func TestAblationConfig(t *testing.T) {
	c := DefaultEvalConfig(".")
	c.Experiments, c.Functions = []string{ExpAblation}, []string{"hello", "image"}
	all := []string{"vanilla", "cached", "reap", "faasnap"}
	if err := c.Resolve(all); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.AblationFunctions, []string{"hello", "image"}) {
		t.Errorf("ablation functions %v", c.AblationFunctions)
	}
	if e := EstimateEval(c); e.Cold != (5+7)*c.Reps || e.Prepares != 2 || e.Warm != 2*c.Reps {
		t.Errorf("estimate %+v", e)
	}
	if len(c.ablationArms("json")) != 5 {
		t.Errorf("json arms %v: the Figure 9 steps belong to image only", c.ablationArms("json"))
	}
	for _, missing := range []string{"reap", "faasnap", "vanilla"} {
		c := DefaultEvalConfig(".")
		c.Experiments = []string{ExpAblation}
		var offered []string
		for _, s := range all {
			if s != missing {
				offered = append(offered, s)
			}
		}
		if err := c.Resolve(offered); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("daemon without %s: %v", missing, err)
		}
	}
	if d := DefaultEvalConfig("."); slicesHas(d.Experiments, ExpAblation) {
		t.Errorf("the ablation runs by default")
	}
}

func slicesHas(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}
