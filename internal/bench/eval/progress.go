package eval

import (
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Cost model of an evaluation run under TCG on 2 cores, in seconds. A
// prepare of hello or json took 10-20 s (boot, two record invocations, two
// snapshots, artifacts; the larger functions import more at boot); a cold
// start of hello or json 0.3-0.5 s from request to the next request
// (eviction, restore, invocation, teardown); a burst of 4 about 2 single
// cold starts. The guest times
// of the larger functions are guesses from docs/bench/evaluation.md (image,
// matmul ~0.5 s invoke at A's size) scaled by input size. It only feeds the
// estimate printed at the start and the progress display's ETA.
const (
	estPrepare = 15.0
	estCopy    = 1.0 // one snapshot copy (~100-200 MB)
	estWarmVM  = 1.5 // restore and first invocation of the warm VM
)

// estCold is the cost of one cold invocation of fn with an input ratio
// times A's size: a fixed part (evict, restore, resume, teardown) and the
// guest's work, which grows with the input.
func estCold(fn string, ratio float64) float64 {
	per := 0.8
	switch fn {
	case "hello", "read-list":
		per = 0.05
	case "mmap", "json", "compression":
		per = 0.2
	case "pagerank", "recognition", "ffmpeg":
		per = 2.0
	}
	return 0.4 + per*ratio
}

func estWarm(fn string) float64 { return estCold(fn, 1) - 0.5 }

// burstFactor is the cost of a burst of n in single cold starts: 2 cores
// run two VMs at once, beyond that they queue.
func burstFactor(n int) float64 {
	if n <= 2 {
		return 1
	}
	return float64(n) / 2
}

// Estimate is what a run will do and how long it should take.
type Estimate struct {
	Seconds  float64 `json:"seconds"`
	Prepares int     `json:"prepares"`
	Cold     int     `json:"cold_starts"`
	Warm     int     `json:"warm_invocations"`
	Copies   int     `json:"snapshot_copies"`
}

// Duration is Seconds as a time.Duration.
func (e Estimate) Duration() time.Duration { return time.Duration(e.Seconds * float64(time.Second)) }

// EstimateEval predicts a run of cfg (cfg must be resolved).
func EstimateEval(cfg EvalConfig) Estimate {
	var e Estimate
	prepared := map[preparedKey]bool{}
	prep := func(fn, v string) {
		if !prepared[preparedKey{fn, v}] {
			prepared[preparedKey{fn, v}] = true
			e.Prepares++
			e.Seconds += estPrep(fn)
		}
	}
	ns := len(cfg.Strategies)
	if cfg.has(ExpExec) {
		for _, fn := range cfg.ExecFunctions {
			prep(fn, "A")
			prep(fn, "B")
			e.Cold += 2 * ns * cfg.Reps
			e.Seconds += 2 * float64(ns*cfg.Reps) * estCold(fn, 1.5)
			if !cfg.NoWarm {
				e.Warm += 2 * cfg.Reps
				e.Seconds += 2 * (estWarmVM + float64(cfg.Reps)*estWarm(fn))
			}
		}
	}
	if cfg.has(ExpSize) {
		for _, fn := range cfg.SizeFunctions {
			prep(fn, "A")
			for _, r := range cfg.Ratios {
				e.Cold += ns * cfg.Reps
				e.Seconds += float64(ns*cfg.Reps) * estCold(fn, r)
			}
		}
	}
	if cfg.has(ExpBurst) {
		maxN := 0
		for _, n := range cfg.BurstSizes {
			maxN = max(maxN, n)
		}
		for _, fn := range cfg.BurstFunctions {
			prep(fn, "A")
			for _, m := range cfg.BurstModes {
				if m == BurstDifferent && maxN > 1 {
					e.Copies += maxN - 1
					e.Seconds += estCopy * float64(maxN-1)
				}
				for _, n := range cfg.BurstSizes {
					e.Cold += n * ns * cfg.Reps
					e.Seconds += float64(ns*cfg.Reps) * estCold(fn, 1) * burstFactor(n)
				}
			}
		}
	}
	if cfg.has(ExpAblation) {
		for _, fn := range cfg.AblationFunctions {
			prep(fn, "A")
			n := len(cfg.ablationArms(fn))
			e.Cold += n * cfg.Reps
			e.Seconds += float64(n*cfg.Reps)*estCold(fn, 1) + estWarmVM + float64(cfg.Reps)*estWarm(fn)
			e.Warm += cfg.Reps
		}
	}
	if cfg.has(ExpBreakdown) {
		for _, fn := range cfg.BreakdownFunctions {
			if cfg.has(ExpExec) && slices.Contains(cfg.ExecFunctions, fn) {
				continue
			}
			prep(fn, "A")
			e.Cold += ns * cfg.Reps
			e.Seconds += float64(ns*cfg.Reps) * estCold(fn, 2)
		}
	}
	return e
}

// Progress prints one line per finished step with the share of the
// estimated work done and the time left, extrapolated from the pace so far.
type Progress struct {
	mu    sync.Mutex
	w     io.Writer
	est   Estimate
	done  float64 // estimated seconds of work finished
	start time.Time
	now   func() time.Time
}

// NewProgress starts a progress display on w for a run estimated as est.
func NewProgress(w io.Writer, est Estimate) *Progress {
	return &Progress{w: w, est: est, start: time.Now(), now: time.Now}
}

// Say prints a line without advancing.
func (p *Progress) Say(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[bench] "+format+"\n", a...)
}

// Done records a finished step worth est seconds of the estimate and prints
// its line with the progress so far.
func (p *Progress) Done(est float64, format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += est
	fmt.Fprintf(p.w, "[bench %s] "+format+"\n", append([]any{p.status()}, a...)...)
}

// status is "37% 12m elapsed ~21m left".
func (p *Progress) status() string {
	elapsed := p.now().Sub(p.start)
	if p.est.Seconds <= 0 || p.done <= 0 {
		return fmt.Sprintf("%s elapsed", elapsed.Round(time.Second))
	}
	frac := min(p.done/p.est.Seconds, 1)
	left := time.Duration(float64(elapsed) / frac * (1 - frac))
	return fmt.Sprintf("%3.0f%% %s elapsed ~%s left", 100*frac, elapsed.Round(time.Second), left.Round(time.Second))
}

// estPrep is a prepare of fn: boot, snapshots, two record invocations.
func estPrep(fn string) float64 { return estPrepare + 4*estCold(fn, 1.5) }
