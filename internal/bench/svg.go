package bench

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// A minimal SVG renderer for the evaluation's figures: grouped bars with
// p10-p90 whiskers (execution time per function and strategy) and lines
// (time against input ratio or burst size). Plain SVG 1.1, no scripts or
// external fonts, so the files render anywhere (browsers, GitHub).

// palette is colour-blind friendly (Okabe-Ito), one colour per series.
var palette = []string{"#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"}

func colorOf(i int) string { return palette[i%len(palette)] }

// BarChart is groups (x axis) of bars, one bar per series.
type BarChart struct {
	Title  string
	YLabel string // with unit, e.g. "execution time (ms)"
	Groups []string
	Series []string
	// Values[g][s] is the bar of series s in group g; NaN leaves a gap.
	Values [][]float64
	// Lo and Hi, if set, are whiskers (e.g. p10 and p90) per bar.
	Lo, Hi [][]float64
	LogY   bool // logarithmic y axis (values spanning decades)
}

// LineChart is series of (x, y) points.
type LineChart struct {
	Title  string
	XLabel string
	YLabel string
	Series []Line
	LogX   bool // logarithmic x axis (base 2 ratios, burst sizes)
}

// Line is one series of a LineChart.
type Line struct {
	Name string
	X, Y []float64
}

const (
	svgW, svgH                     = 900, 420
	padL, padR, padT, padB         = 80, 160, 40, 90
	plotW, plotH                   = svgW - padL - padR, svgH - padT - padB
	fontAttr                       = `font-family="sans-serif" font-size="12"`
	axisColor, gridColor, txtColor = "#333", "#ddd", "#222"
)

// axis maps data values to pixels along one axis.
type axis struct {
	lo, hi float64
	log    bool
	px     float64 // length in pixels
}

func (a axis) pos(v float64) float64 {
	if a.log {
		v, lo, hi := math.Log10(v), math.Log10(a.lo), math.Log10(a.hi)
		return (v - lo) / (hi - lo) * a.px
	}
	return (v - a.lo) / (a.hi - a.lo) * a.px
}

// ticks returns tick values: 1-2-5 steps for linear axes, powers of ten
// (with 2 and 5 between when there are few decades) for log axes.
func (a axis) ticks() []float64 {
	var out []float64
	if a.log {
		d0, d1 := math.Floor(math.Log10(a.lo)), math.Ceil(math.Log10(a.hi))
		mults := []float64{1}
		if d1-d0 <= 3 {
			mults = []float64{1, 2, 5}
		}
		for d := d0; d <= d1; d++ {
			for _, m := range mults {
				v := m * math.Pow(10, d)
				if v >= a.lo*(1-1e-9) && v <= a.hi*(1+1e-9) {
					out = append(out, v)
				}
			}
		}
		return out
	}
	step := niceStep((a.hi - a.lo) / 6)
	for v := math.Ceil(a.lo/step) * step; v <= a.hi+step*1e-9; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds x up to 1, 2, 2.5 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// fmtTick prints a tick value compactly: 0.25, 2, 1500, 1e+05.
func fmtTick(v float64) string {
	if v != 0 && (math.Abs(v) >= 1e5 || math.Abs(v) < 1e-3) {
		return fmt.Sprintf("%.0e", v)
	}
	return FormatRatio(v)
}

// dataRange returns the finite min and max of vs (ok false if none).
func dataRange(vs ...[]float64) (lo, hi float64, ok bool) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		for _, x := range v {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				lo, hi, ok = math.Min(lo, x), math.Max(hi, x), true
			}
		}
	}
	return lo, hi, ok
}

// yAxis builds a y axis covering lo..hi (from zero for linear axes).
func yAxis(lo, hi float64, log bool) axis {
	if log {
		if lo <= 0 {
			lo = hi / 1000
		}
		if hi <= 0 {
			hi, lo = 1, 0.1
		}
		return axis{lo: math.Pow(10, math.Floor(math.Log10(lo))), hi: math.Pow(10, math.Ceil(math.Log10(hi))), log: true, px: plotH}
	}
	if hi <= 0 {
		hi = 1
	}
	step := niceStep(hi / 6)
	return axis{lo: 0, hi: math.Ceil(hi/step) * step, px: plotH}
}

type svgDoc struct{ b strings.Builder }

func (d *svgDoc) f(format string, a ...any) { fmt.Fprintf(&d.b, format, a...) }

func esc(s string) string { return html.EscapeString(s) }

func (d *svgDoc) begin(title string) {
	d.f(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s>`+"\n", svgW, svgH, svgW, svgH, fontAttr)
	d.f(`<title>%s</title>`+"\n", esc(title))
	d.f(`<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	d.f(`<text x="%d" y="22" font-size="15" font-weight="bold" fill="%s">%s</text>`+"\n", padL, txtColor, esc(title))
}

func (d *svgDoc) end() { d.f("</svg>\n") }

// yGrid draws the y axis, its ticks, grid lines and label.
func (d *svgDoc) yGrid(y axis, label string) {
	for _, t := range y.ticks() {
		py := float64(padT+plotH) - y.pos(t)
		d.f(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s"/>`+"\n", padL, py, padL+plotW, py, gridColor)
		d.f(`<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", padL-6, py+4, txtColor, fmtTick(t))
	}
	d.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT, padL, padT+plotH, axisColor)
	d.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s"/>`+"\n", padL, padT+plotH, padL+plotW, padT+plotH, axisColor)
	d.f(`<text transform="translate(18,%d) rotate(-90)" text-anchor="middle" fill="%s">%s</text>`+"\n", padT+plotH/2, txtColor, esc(label))
}

// legend lists the series with their colours at the right.
func (d *svgDoc) legend(names []string, lines bool) {
	x := padL + plotW + 16
	for i, n := range names {
		y := padT + 8 + 20*i
		if lines {
			d.f(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2.5"/>`+"\n", x, y, x+18, y, colorOf(i))
			d.f(`<circle cx="%d" cy="%d" r="3.5" fill="%s"/>`+"\n", x+9, y, colorOf(i))
		} else {
			d.f(`<rect x="%d" y="%d" width="14" height="14" fill="%s"/>`+"\n", x, y-7, colorOf(i))
		}
		d.f(`<text x="%d" y="%d" fill="%s">%s</text>`+"\n", x+24, y+4, txtColor, esc(n))
	}
}

// SVG renders the chart.
func (c BarChart) SVG() string {
	var d svgDoc
	d.begin(c.Title)
	lo, hi, ok := dataRange(append(append(append([][]float64{}, c.Values...), c.Hi...), c.Lo...)...)
	if !ok {
		lo, hi = 0, 1
	}
	y := yAxis(lo, hi, c.LogY)
	d.yGrid(y, c.YLabel)
	ng, ns := len(c.Groups), len(c.Series)
	if ng > 0 && ns > 0 {
		gw := float64(plotW) / float64(ng)
		bw := gw * 0.8 / float64(ns)
		base := float64(padT + plotH)
		for g, name := range c.Groups {
			gx := float64(padL) + gw*float64(g)
			for s := 0; s < ns; s++ {
				v := at(c.Values, g, s)
				if math.IsNaN(v) {
					continue
				}
				x := gx + gw*0.1 + bw*float64(s)
				top := base - clampPx(y, v)
				d.f(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s / %s: %.4g</title></rect>`+"\n",
					x, top, math.Max(bw-1, 1), base-top, colorOf(s), esc(name), esc(c.Series[s]), v)
				l, h := at(c.Lo, g, s), at(c.Hi, g, s)
				if !math.IsNaN(l) && !math.IsNaN(h) {
					cx := x + bw/2
					d.f(`<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", cx, base-clampPx(y, l), cx, base-clampPx(y, h), axisColor)
				}
			}
			lx := gx + gw/2
			d.f(`<text transform="translate(%.1f,%d) rotate(-35)" text-anchor="end" fill="%s">%s</text>`+"\n", lx, padT+plotH+14, txtColor, esc(name))
		}
	}
	d.legend(c.Series, false)
	d.end()
	return d.b.String()
}

// clampPx is v's height in pixels above the axis, kept inside the plot.
func clampPx(y axis, v float64) float64 {
	if y.log && v <= y.lo {
		return 0
	}
	return math.Max(0, math.Min(y.pos(v), y.px))
}

func at(m [][]float64, i, j int) float64 {
	if i < len(m) && j < len(m[i]) {
		return m[i][j]
	}
	return math.NaN()
}

// SVG renders the chart.
func (c LineChart) SVG() string {
	var d svgDoc
	d.begin(c.Title)
	var xs, ys [][]float64
	for _, l := range c.Series {
		xs, ys = append(xs, l.X), append(ys, l.Y)
	}
	xlo, xhi, okX := dataRange(xs...)
	ylo, yhi, okY := dataRange(ys...)
	if !okX {
		xlo, xhi = 0, 1
	}
	if !okY {
		ylo, yhi = 0, 1
	}
	if xlo == xhi {
		xlo, xhi = xlo/2, xhi*2
		if xlo == 0 {
			xhi = 1
		}
	}
	y := yAxis(ylo, yhi, false)
	x := axis{lo: xlo, hi: xhi, log: c.LogX && xlo > 0, px: plotW}
	d.yGrid(y, c.YLabel)
	// x ticks: the data's own x values (ratios, burst sizes) read best.
	var xt []float64
	for _, l := range c.Series {
		for _, v := range l.X {
			if !contains64(xt, v) {
				xt = append(xt, v)
			}
		}
	}
	for _, t := range xt {
		px := float64(padL) + x.pos(t)
		d.f(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="%s"/>`+"\n", px, padT+plotH, px, padT+plotH+5, axisColor)
		d.f(`<text x="%.1f" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", px, padT+plotH+18, txtColor, fmtTick(t))
	}
	d.f(`<text x="%d" y="%d" text-anchor="middle" fill="%s">%s</text>`+"\n", padL+plotW/2, padT+plotH+42, txtColor, esc(c.XLabel))
	for i, l := range c.Series {
		var pts []string
		for k := range l.X {
			if k >= len(l.Y) || math.IsNaN(l.Y[k]) {
				continue
			}
			px, py := float64(padL)+x.pos(l.X[k]), float64(padT+plotH)-clampPx(y, l.Y[k])
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
			d.f(`<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"><title>%s: %s → %.4g</title></circle>`+"\n",
				px, py, colorOf(i), esc(l.Name), fmtTick(l.X[k]), l.Y[k])
		}
		if len(pts) > 1 {
			d.f(`<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), colorOf(i))
		}
	}
	names := make([]string, len(c.Series))
	for i, l := range c.Series {
		names[i] = l.Name
	}
	d.legend(names, true)
	d.end()
	return d.b.String()
}

func contains64(l []float64, v float64) bool {
	for _, x := range l {
		if x == v {
			return true
		}
	}
	return false
}

// FormatRatio prints a ratio with up to three decimals, without trailing zeros.
func FormatRatio(x float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", x), "0"), ".")
}
