package bench

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

func TestSummarize(t *testing.T) {
	cases := []struct {
		name string
		in   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{7}, Summary{N: 1, Median: 7, P10: 7, P90: 7, Min: 7, Max: 7, Mean: 7}},
		{"odd unsorted", []float64{5, 1, 3}, Summary{N: 3, Median: 3, P10: 1.4, P90: 4.6, Min: 1, Max: 5, Mean: 3}},
		{"even", []float64{4, 1, 3, 2}, Summary{N: 4, Median: 2.5, P10: 1.3, P90: 3.7, Min: 1, Max: 4, Mean: 2.5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := Summarize(tc.in)
			for _, f := range []struct {
				name      string
				got, want float64
			}{{"median", got.Median, tc.want.Median}, {"p10", got.P10, tc.want.P10}, {"p90", got.P90, tc.want.P90},
				{"min", got.Min, tc.want.Min}, {"max", got.Max, tc.want.Max}, {"mean", got.Mean, tc.want.Mean}} {
				if math.Abs(f.got-f.want) > 1e-9 {
					t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
				}
			}
			if got.N != tc.want.N {
				t.Errorf("n = %d, want %d", got.N, tc.want.N)
			}
		})
	}
	in := []float64{3, 1, 2}
	Summarize(in)
	if in[0] != 3 {
		t.Error("Summarize reordered its input")
	}
}

func TestGeoMean(t *testing.T) {
	if g := GeoMean([]float64{2, 8}); math.Abs(g-4) > 1e-12 {
		t.Errorf("geomean(2,8) = %v", g)
	}
	for _, bad := range [][]float64{nil, {1, 0}, {-1, 4}} {
		if !math.IsNaN(GeoMean(bad)) {
			t.Errorf("geomean(%v) should be NaN", bad)
		}
	}
}

func TestStrategiesSummaryAndMarkdown(t *testing.T) {
	r := &StrategiesResult{Strategies: []string{"vanilla", "faasnap"}, Reps: 2}
	for _, s := range []StrategySample{
		{Function: "a", Strategy: "vanilla", TotalMS: 200, MajorFaults: 10, ReadBytes: 4 << 20},
		{Function: "a", Strategy: "vanilla", TotalMS: 220, MajorFaults: 12, ReadBytes: 4 << 20},
		{Function: "a", Strategy: "faasnap", TotalMS: 100, Stats: map[string]any{"loader_bytes": float64(8 << 20)}, DaemonBytes: 8 << 20},
		{Function: "a", Strategy: "faasnap", TotalMS: 110, DaemonBytes: 8 << 20},
		{Function: "b", Strategy: "vanilla", TotalMS: 400},
		{Function: "b", Strategy: "faasnap", TotalMS: 400},
	} {
		r.Samples = append(r.Samples, s)
	}
	r.summarize()
	if c := r.Cells["a"]["vanilla"]; c.Total.Median != 210 || c.MajorFaults != 11 || c.ReadMiB != 4 {
		t.Errorf("cell a/vanilla = %+v", c)
	}
	if c := r.Cells["a"]["faasnap"]; c.DaemonMiB != 8 {
		t.Errorf("cell a/faasnap daemon MiB = %v", c.DaemonMiB)
	}
	// a: 210/105 = 2, b: 1 -> geometric mean sqrt(2).
	if got := r.Speedups["faasnap_over_vanilla"]; math.Abs(got-math.Sqrt2) > 1e-9 {
		t.Errorf("faasnap over vanilla = %v, want %v", got, math.Sqrt2)
	}
	md := r.Markdown()
	benchtest.WantAll(t, "markdown", md, "| a | vanilla | **210.0** |", "| b | faasnap | **400.0** |", "faasnap over vanilla: 1.41×")
}

// Samples written before the strategies' own fields moved into Stats read
// back with them there (the ablation table of an earlier run).
func TestReadLegacySamples(t *testing.T) {
	path := filepath.Join(t.TempDir(), "eval.jsonl")
	old := `{"function":"hello","strategy":"faasnap","rep":0,"total_ms":100,"loader_bytes":40853504,"loader_ms":15.8,"uffd_faults":3}
{"function":"hello","strategy":"reap","rep":0,"total_ms":90,"stats":{"prefetch_pages":1394}}
`
	if err := os.WriteFile(path, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	ss, err := ReadSamples[StrategySample](path)
	if err != nil || len(ss) != 2 {
		t.Fatalf("%v %+v", err, ss)
	}
	if ss[0].StatNum("loader_bytes") != 40853504 || ss[0].StatNum("loader_ms") != 15.8 || ss[0].StatNum("faults_served") != 3 {
		t.Errorf("legacy sample: %+v", ss[0].Stats)
	}
	if len(ss[1].Stats) != 1 || ss[1].StatNum("prefetch_pages") != 1394 {
		t.Errorf("current sample: %+v", ss[1].Stats)
	}
}
