// Package policy decides how a function's cold starts restore, from the
// cold starts it has already served: a bandit over the restore strategies
// whose artifacts exist (Location.Decide), and a detector of working sets
// that no longer fit the inputs (DriftWindow). It is pure: no I/O, and time
// and randomness come in as arguments (docs/design.md, "Adaptive restore").
package policy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// The policy's constants (docs/design.md, "Adaptive restore").
const (
	// Window is how many recent cold starts a strategy's evidence keeps.
	Window = 20
	// MinSamples is how many samples a strategy needs before its median
	// competes; a current choice with fewer is kept while it is measured.
	MinSamples = 3
	// ExploreShare bounds explorations: at most this share of a
	// location's cold starts, counting the one being decided.
	ExploreShare = 0.10
	// SwitchMargin: the choice moves to another strategy only when that
	// one's median total is this much below the current choice's.
	SwitchMargin = 0.03
	// NoiseFloor is the least spread (of log totals) Thompson sampling
	// assumes for a strategy, so a few equal samples do not look certain.
	NoiseFloor = 0.05
	// MaxSampleAge drops evidence older than this.
	MaxSampleAge = 24 * time.Hour
)

// How a decision was made (Decision.How).
const (
	HowRule    = "rule"    // no evidence yet: the location's rule (preference order)
	HowMeasure = "measure" // the current choice has fewer than MinSamples samples: measured first
	HowExploit = "exploit" // the lowest median total
	HowExplore = "explore" // Thompson sampling picked another strategy, within the budget
)

// Sample is one cold start's measurements.
type Sample struct {
	At        time.Time `json:"at"`
	TotalMS   float64   `json:"total_ms"`
	SetupMS   float64   `json:"setup_ms"`
	ResumeMS  float64   `json:"resume_ms"`
	Faults    uint64    `json:"faults"`     // major page faults of the VMM, plus faults the strategy served
	BytesRead uint64    `json:"bytes_read"` // by the VMM from storage, and by the daemon for the strategy
}

// Arm is one strategy's recent evidence at a location, oldest first.
type Arm struct {
	Samples []Sample `json:"samples"`
}

// Location is the policy's state for one function version and one place
// its snapshot lives (local, or remote in the registry).
type Location struct {
	// Snapshot is the snapshot the evidence was measured on: artifacts
	// belong to one snapshot, so a new one starts the evidence afresh.
	Snapshot  string    `json:"snapshot"`
	Choice    string    `json:"choice,omitempty"`
	ChangedAt time.Time `json:"changed_at,omitempty"`
	Reason    string    `json:"reason,omitempty"`
	// Before is the choice a Reset cleared, until the next decision.
	Before       string          `json:"before,omitempty"`
	ColdStarts   int             `json:"cold_starts"`
	Explorations int             `json:"explorations"`
	Arms         map[string]*Arm `json:"arms,omitempty"`
}

// Options are what one decision needs besides the state.
type Options struct {
	// Arms are the strategies whose artifacts exist for the snapshot, in
	// the location's order of preference (its rule: the first is where a
	// location without evidence starts).
	Arms []string
	// Rule says why the arms are in that order (for Decision.Reason).
	Rule string
	// Queueing: VM starts are waiting for room; no exploration then.
	Queueing bool
	Now      time.Time
	Rand     *rand.Rand
}

// Decision is the strategy one cold start restores with.
type Decision struct {
	Strategy string `json:"strategy"`
	How      string `json:"how"`
	Reason   string `json:"reason"`
}

// Evidence summarizes one strategy's samples, as the API shows it.
type Evidence = wire.StrategyEvidence

// Reset starts the evidence and the choice afresh for snapshot (a new
// one, or the first), keeping the counters.
func (l *Location) Reset(snapshot string) {
	l.Snapshot = snapshot
	l.Arms = nil
	if l.Choice != "" {
		l.Before, l.Choice = l.Choice, ""
	}
}

// Forget drops a strategy's evidence (its artifacts were recorded again).
func (l *Location) Forget(strategy string) { delete(l.Arms, strategy) }

// Observe adds a cold start's sample to strategy's evidence.
func (l *Location) Observe(strategy string, s Sample) {
	if l.Arms == nil {
		l.Arms = map[string]*Arm{}
	}
	a := l.Arms[strategy]
	if a == nil {
		a = &Arm{}
		l.Arms[strategy] = a
	}
	a.Samples = append(a.Samples, s)
	if len(a.Samples) > Window {
		a.Samples = append([]Sample(nil), a.Samples[len(a.Samples)-Window:]...)
	}
}

// prune drops samples older than MaxSampleAge.
func (l *Location) prune(now time.Time) {
	for k, a := range l.Arms {
		i := 0
		for i < len(a.Samples) && now.Sub(a.Samples[i].At) > MaxSampleAge {
			i++
		}
		a.Samples = a.Samples[i:]
		if len(a.Samples) == 0 {
			delete(l.Arms, k)
		}
	}
}

// n is how many samples strategy has.
func (l *Location) n(strategy string) int {
	if a := l.Arms[strategy]; a != nil {
		return len(a.Samples)
	}
	return 0
}

func (l *Location) totals(strategy string) []float64 {
	a := l.Arms[strategy]
	if a == nil {
		return nil
	}
	out := make([]float64, len(a.Samples))
	for i, s := range a.Samples {
		out[i] = s.TotalMS
	}
	return out
}

// Decide picks the strategy of one cold start and counts it: the greedy
// choice (the lowest median total among strategies with MinSamples, kept
// unless another is SwitchMargin better; a choice still being measured is
// kept; without evidence the rule's first arm), unless exploration is
// allowed (never while queueing, at most ExploreShare of cold starts) and
// Thompson sampling over the arms' log totals picks another (an arm
// without samples is picked first). An empty Arms decides nothing.
func (l *Location) Decide(o Options) Decision {
	if len(o.Arms) == 0 {
		return Decision{}
	}
	l.prune(o.Now)
	d := l.greedy(o)
	l.ColdStarts++
	if l.mayExplore(o) {
		if pick := l.thompson(o); pick != d.Strategy {
			l.Explorations++
			return Decision{Strategy: pick, How: HowExplore, Reason: fmt.Sprintf("exploring %s (%d samples; %d of %d cold starts explored)",
				pick, l.n(pick), l.Explorations, l.ColdStarts)}
		}
	}
	if d.Strategy != l.Choice {
		if l.Choice != "" || d.Strategy != l.Before {
			l.ChangedAt = o.Now
		}
		l.Choice, l.Reason, l.Before = d.Strategy, d.Reason, ""
	}
	return d
}

// mayExplore: exploration stays within its budget and off while queueing.
func (l *Location) mayExplore(o Options) bool {
	return !o.Queueing && len(o.Arms) > 1 && o.Rand != nil &&
		float64(l.Explorations+1) <= ExploreShare*float64(l.ColdStarts)
}

// greedy is the choice without exploration.
func (l *Location) greedy(o Options) Decision {
	cur := l.Choice
	if !slices.Contains(o.Arms, cur) {
		cur = ""
	}
	if cur != "" && l.n(cur) < MinSamples {
		if l.n(cur) == 0 && len(l.Arms) == 0 {
			return Decision{Strategy: cur, How: HowRule, Reason: l.Reason}
		}
		return Decision{Strategy: cur, How: HowMeasure,
			Reason: fmt.Sprintf("%s is measured first (%d of %d samples)", cur, l.n(cur), MinSamples)}
	}
	best, bestMed := "", math.Inf(1)
	for _, a := range o.Arms {
		if l.n(a) < MinSamples {
			continue
		}
		if m := median(l.totals(a)); m < bestMed {
			best, bestMed = a, m
		}
	}
	switch {
	case best == "" && cur != "":
		return Decision{Strategy: cur, How: HowExploit, Reason: l.Reason}
	case best == "":
		return Decision{Strategy: o.Arms[0], How: HowRule, Reason: ruleReason(o)}
	case cur != "" && best != cur && bestMed >= (1-SwitchMargin)*median(l.totals(cur)):
		best = cur
	}
	return Decision{Strategy: best, How: HowExploit, Reason: l.ranking(o, best)}
}

func ruleReason(o Options) string {
	if o.Rule != "" {
		return "rule: " + o.Rule
	}
	return "rule: " + o.Arms[0] + " first"
}

// ranking says why best is chosen: the medians of the measured arms.
func (l *Location) ranking(o Options, best string) string {
	var parts []string
	for _, a := range o.Arms {
		if a != best && l.n(a) >= MinSamples {
			parts = append(parts, fmt.Sprintf("%s %.1f ms", a, median(l.totals(a))))
		}
	}
	why := fmt.Sprintf("%s has the lowest median total, %.1f ms over %d cold starts", best, median(l.totals(best)), l.n(best))
	if len(parts) > 0 {
		why += " (" + strings.Join(parts, ", ") + ")"
	}
	return why
}

// thompson draws a mean log total per arm from its posterior and returns
// the arm with the lowest draw; arms without samples come first, in
// preference order.
func (l *Location) thompson(o Options) string {
	best, bestDraw := "", math.Inf(1)
	for _, a := range o.Arms {
		xs := l.totals(a)
		if len(xs) == 0 {
			return a
		}
		mean, sd := logStats(xs)
		draw := mean + o.Rand.NormFloat64()*max(sd, NoiseFloor)/math.Sqrt(float64(len(xs)))
		if draw < bestDraw {
			best, bestDraw = a, draw
		}
	}
	return best
}

// logStats is the mean and standard deviation of log(xs).
func logStats(xs []float64) (mean, sd float64) {
	for _, x := range xs {
		mean += math.Log(max(x, 1e-3))
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		d := math.Log(max(x, 1e-3)) - mean
		sd += d * d
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// Evidence summarizes every strategy's samples, in name order.
func (l *Location) Evidence() []Evidence {
	var out []Evidence
	for k, a := range l.Arms {
		if len(a.Samples) == 0 {
			continue
		}
		e := Evidence{Strategy: k, Samples: len(a.Samples), LastAt: a.Samples[len(a.Samples)-1].At}
		col := func(f func(Sample) float64) float64 {
			v := make([]float64, len(a.Samples))
			for i, s := range a.Samples {
				v[i] = f(s)
			}
			return median(v)
		}
		e.MedianTotalMS = col(func(s Sample) float64 { return s.TotalMS })
		e.MedianSetupMS = col(func(s Sample) float64 { return s.SetupMS })
		e.MedianResumeMS = col(func(s Sample) float64 { return s.ResumeMS })
		e.MedianFaults = col(func(s Sample) float64 { return float64(s.Faults) })
		e.MedianBytesRead = col(func(s Sample) float64 { return float64(s.BytesRead) })
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Strategy < out[j].Strategy })
	return out
}

// median of xs (0 for none); xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
