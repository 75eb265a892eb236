package bench

import (
	"math"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

func TestBarChartSVG(t *testing.T) {
	nan := math.NaN()
	c := BarChart{Title: "Execution <time> & more", YLabel: "total time (ms, log scale)", LogY: true,
		Groups: []string{"hello", "json", "pagerank"}, Series: []string{"warm", "vanilla", "faasnap"},
		Values: [][]float64{{20, 240, 200}, {50, 600, nan}, {900, 4000, 2500}},
		Lo:     [][]float64{{18, 230, 190}, {45, 580, nan}, {850, 3500, 2400}},
		Hi:     [][]float64{{25, 260, 230}, {55, 700, nan}, {950, 4500, 2600}}}
	s := c.SVG()
	n := benchtest.WellFormed(t, s)
	// 8 bars (one NaN gap) + 3 legend swatches + background.
	if n["rect"] != 8+3+1 {
		t.Errorf("rects = %d, want 12", n["rect"])
	}
	benchtest.WantAll(t, "SVG", s, "Execution &lt;time&gt; &amp; more", "total time (ms, log scale)", ">pagerank<", ">faasnap<", ">1000<", ">100<")
	if strings.Contains(s, "NaN") || strings.Contains(s, "Inf") {
		t.Error("SVG contains NaN or Inf coordinates")
	}
}

func TestLineChartSVG(t *testing.T) {
	c := LineChart{Title: "Input size: json", XLabel: "test input size / record input size", YLabel: "total time (ms)", LogX: true,
		Series: []Line{
			{Name: "vanilla", X: []float64{0.25, 0.5, 1, 2, 4}, Y: []float64{300, 320, 350, 420, 600}},
			{Name: "faasnap", X: []float64{0.25, 0.5, 1, 2, 4}, Y: []float64{250, 260, math.NaN(), 330, 500}},
		}}
	s := c.SVG()
	n := benchtest.WellFormed(t, s)
	if n["polyline"] != 2 || n["circle"] != 9+2 { // 9 points + 2 legend markers
		t.Errorf("polylines %d circles %d, want 2 and 11", n["polyline"], n["circle"])
	}
	benchtest.WantAll(t, "SVG", s, ">0.25<", ">4<", "test input size / record input size", "total time (ms)", ">vanilla<")
	// Log x: 0.25, 1 and 4 are equally spaced.
	x := func(v float64) float64 { return axis{lo: 0.25, hi: 4, log: true, px: plotW}.pos(v) }
	if d1, d2 := x(1)-x(0.25), x(4)-x(1); math.Abs(d1-d2) > 1e-9 {
		t.Errorf("log axis not even: %v vs %v", d1, d2)
	}
}

func TestChartsWithoutData(t *testing.T) {
	benchtest.WellFormed(t, BarChart{Title: "empty"}.SVG())
	benchtest.WellFormed(t, LineChart{Title: "empty"}.SVG())
	benchtest.WellFormed(t, LineChart{Title: "one point", Series: []Line{{Name: "a", X: []float64{1}, Y: []float64{5}}}}.SVG())
	benchtest.WellFormed(t, BarChart{Title: "zeros", Groups: []string{"a"}, Series: []string{"s"}, Values: [][]float64{{0}}, LogY: true}.SVG())
}

func TestAxisTicks(t *testing.T) {
	for _, tc := range []struct {
		x, want float64
	}{{0.7, 1}, {1, 1}, {1.3, 2}, {3, 5}, {7, 10}, {130, 200}, {210, 250}, {0, 1}} {
		if got := niceStep(tc.x); got != tc.want {
			t.Errorf("niceStep(%v) = %v, want %v", tc.x, got, tc.want)
		}
	}
	y := yAxis(0, 1234, false)
	if y.hi != 1250 || y.lo != 0 {
		t.Errorf("linear axis %v..%v, want 0..1250", y.lo, y.hi)
	}
	if got := y.ticks(); len(got) != 6 || got[len(got)-1] != 1250 {
		t.Errorf("ticks %v", got)
	}
	l := yAxis(20, 4500, true)
	if l.lo != 10 || l.hi != 10000 {
		t.Errorf("log axis %v..%v, want 10..10000", l.lo, l.hi)
	}
	if got := l.ticks(); got[0] != 10 || got[len(got)-1] != 10000 {
		t.Errorf("log ticks %v", got)
	}
	if fmtTick(0.25) != "0.25" || fmtTick(1500) != "1500" || fmtTick(2e6) != "2e+06" {
		t.Errorf("fmtTick: %s %s %s", fmtTick(0.25), fmtTick(1500), fmtTick(2e6))
	}
}
