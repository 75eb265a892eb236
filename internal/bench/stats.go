// Package bench measures thaw through its API, the way a user sees it, and
// summarizes samples. Runs only emit data (JSON lines and a Markdown table);
// comparisons across runs are done by reading those files.
package bench

import (
	"math"
	"sort"
)

// Summary describes a set of samples in milliseconds.
type Summary struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P10    float64 `json:"p10"`
	P90    float64 `json:"p90"`
	Min    float64 `json:"min"`
	Max    float64 `json:"max"`
	Mean   float64 `json:"mean"`
}

// Summarize computes order statistics (linear interpolation between closest
// ranks) of xs. An empty input gives a zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{N: len(s), Median: Quantile(s, 0.5), P10: Quantile(s, 0.1), P90: Quantile(s, 0.9),
		Min: s[0], Max: s[len(s)-1], Mean: sum / float64(len(s))}
}

// Quantile of sorted xs, q in [0,1], by linear interpolation.
func Quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(sorted)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	frac := pos - float64(lo)
	return sorted[lo]*(1-frac) + sorted[hi]*frac
}

// GeoMean is the geometric mean of positive values (NaN if any is not).
func GeoMean(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	var logs float64
	for _, x := range xs {
		if x <= 0 {
			return math.NaN()
		}
		logs += math.Log(x)
	}
	return math.Exp(logs / float64(len(xs)))
}
