package eval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/wire"
)

// The adaptive experiments (thaw bench adaptive): sequences of cold starts
// run by the adaptive restore (auto, refreshing its sets from traffic)
// and, side by side, by each fixed strategy, each arm on its own copy of
// the function; the arms take turns at every step so the machine's drift
// spreads over all of them.

// Arms of the adaptive experiments: "auto" (strategy auto, refresh from
// traffic), a strategy (fixed, never refreshed) or STRATEGY+refresh
// (fixed, refreshed from traffic).
const (
	ArmAuto        = "auto"
	refreshSuffix  = "+refresh"
	driftPhaseA    = "A"
	driftPhaseB    = "B"
	adaptiveWaitOp = 10 * time.Minute
)

// DefaultDriftArms are the drift experiment's arms.
var DefaultDriftArms = []string{ArmAuto, "vanilla", "reap", "reap" + refreshSuffix, "faasnap", "snapbpf"}

// DriftConfig configures the drift experiment: Case is prepared with its
// RecordEvent (input A); the first half of ColdStarts runs A, the second
// half TestEvent (input B).
type DriftConfig struct {
	Case       bench.FunctionCase            `json:"case"`
	Arms       []string                      `json:"arms"`
	ColdStarts int                           `json:"cold_starts"`
	Sink       io.Writer                     `json:"-"` // every sample as a JSON line
	Say        func(format string, a ...any) `json:"-"`
}

// AdaptiveSample is one cold start of an arm (one JSON line).
type AdaptiveSample struct {
	Experiment string  `json:"experiment"`
	Arm        string  `json:"arm"`
	Function   string  `json:"function"`
	Step       int     `json:"step"`
	Phase      string  `json:"phase"`               // drift: A or B; mixed: local or remote
	Strategy   string  `json:"strategy"`            // the strategy that ran
	How        string  `json:"how,omitempty"`       // how it was chosen
	TotalMS    float64 `json:"total_ms"`            // the invocation's timing.total_ms
	SetupMS    float64 `json:"setup_ms"`            //
	ResumeMS   float64 `json:"resume_ms"`           //
	ImportMS   float64 `json:"import_ms,omitempty"` // a remote arm's import (part of total)
	// FetchedBytes: what the cold start read for guest memory: QEMU from
	// storage, the daemon for the strategy, and the memory source from the
	// registry.
	FetchedBytes uint64  `json:"fetched_bytes"`
	MajorFaults  uint64  `json:"major_faults"`
	SetPages     uint64  `json:"set_pages,omitempty"`
	OutsideRatio float64 `json:"outside_ratio,omitempty"`
	// Refreshed: a refresh of the arm's set had succeeded before this cold
	// start.
	Refreshed bool `json:"refreshed,omitempty"`
}

// ArmSummary is one arm over a whole sequence.
type ArmSummary struct {
	TotalMS      float64            `json:"total_ms"`          // sum of cold-start totals
	PhaseMS      map[string]float64 `json:"phase_ms"`          // sum per phase
	PhaseMedian  map[string]float64 `json:"phase_median_ms"`   // median cold start per phase
	FetchedBytes map[string]uint64  `json:"phase_fetched"`     // bytes fetched per phase
	Strategies   map[string]int     `json:"strategies"`        // cold starts per strategy that ran
	Explorations int                `json:"explorations"`      // auto: cold starts that explored
	RefreshAt    int                `json:"refresh_at"`        // first step after a refresh succeeded (-1: none)
	OutsideAfter float64            `json:"outside_after"`     // median outside ratio after the refresh
	OutsideDrift float64            `json:"outside_drift"`     // median outside ratio in phase B before it
	Choice       string             `json:"choice,omitempty"`  // auto: its choice at the end
	Restore      json.RawMessage    `json:"restore,omitempty"` // auto: its restore document at the end
}

// AdaptiveResult is a run of one adaptive experiment.
type AdaptiveResult struct {
	Experiment string                `json:"experiment"`
	Machine    bench.Machine         `json:"machine"`
	When       time.Time             `json:"when"`
	Drift      *DriftConfig          `json:"drift,omitempty"`
	Mixed      *MixedConfig          `json:"mixed,omitempty"`
	Samples    []AdaptiveSample      `json:"samples"`
	Arms       map[string]ArmSummary `json:"arms"`
	// Best is the fixed arm with the lowest total, chosen in hindsight;
	// AutoOverBest auto's total over it (≤ 1.05 is the target);
	// DefaultOverAuto the default fixed strategy's (vanilla) total over
	// auto's (≥ 1.15 on the drift sequence is the target).
	Best            string  `json:"best"`
	AutoOverBest    float64 `json:"auto_over_best"`
	DefaultOverAuto float64 `json:"default_over_auto"`
}

// armFunction is the function an arm runs.
func armFunction(base, arm string) string {
	return base + "-" + strings.NewReplacer("+", "-").Replace(arm)
}

// armOptions are the function options of an arm.
func armOptions(arm string) []client.FunctionOption {
	switch {
	case arm == ArmAuto:
		return []client.FunctionOption{client.WithStrategy(wire.StrategyAuto), client.WithRefresh(wire.RefreshTraffic)}
	case strings.HasSuffix(arm, refreshSuffix):
		return []client.FunctionOption{client.WithStrategy(strings.TrimSuffix(arm, refreshSuffix)), client.WithRefresh(wire.RefreshTraffic)}
	}
	return []client.FunctionOption{client.WithStrategy(arm), client.WithRefresh(wire.RefreshOff)}
}

// freshFunction creates name from fc anew (deleting what a former run
// left) with opts.
func freshFunction(ctx context.Context, c *client.Client, fc bench.FunctionCase, name string, opts ...client.FunctionOption) error {
	if _, err := c.GetFunction(ctx, name); err == nil {
		if _, err := c.DeleteFunctionWith(ctx, name, client.DeleteFunctionOptions{Cascade: true}); err != nil {
			return fmt.Errorf("delete %s from a former run: %w", name, err)
		}
	}
	if len(fc.Services) > 0 {
		opts = append(opts, client.WithServices(fc.Services...))
	}
	if _, err := c.CreateFunctionFromDir(ctx, name, fc.Dir, fc.MemoryMiB, 1, opts...); err != nil {
		return fmt.Errorf("create %s: %w", name, err)
	}
	return nil
}

// RunDrift runs the drift experiment against the daemon c.
func RunDrift(ctx context.Context, c *client.Client, cfg DriftConfig) (*AdaptiveResult, error) {
	if cfg.ColdStarts < 2 || len(cfg.Arms) == 0 || !slices.Contains(cfg.Arms, ArmAuto) {
		return nil, errors.New("drift: give at least 2 cold starts and the arms, auto among them")
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	res := &AdaptiveResult{Experiment: "drift", Machine: bench.DescribeMachine(info), When: time.Now().UTC(), Drift: &cfg}
	fc := cfg.Case
	for _, arm := range cfg.Arms {
		name := armFunction(fc.Name, arm)
		if err := freshFunction(ctx, c, fc, name, armOptions(arm)...); err != nil {
			return nil, err
		}
		cfg.Say("%s: prepare with input A", name)
		if _, err := c.Prepare(ctx, name, fc.RecordEvent, client.PrepareOptions{}); err != nil {
			return nil, fmt.Errorf("prepare %s: %w", name, err)
		}
	}
	for step := 0; step < cfg.ColdStarts; step++ {
		phase, event := driftPhaseA, fc.RecordEvent
		if step >= cfg.ColdStarts/2 {
			phase, event = driftPhaseB, fc.TestEvent
		}
		for i := range cfg.Arms {
			arm := cfg.Arms[(i+step)%len(cfg.Arms)]
			s, err := coldSample(ctx, c, "drift", arm, armFunction(fc.Name, arm), step, phase, event)
			if err != nil {
				return nil, err
			}
			res.add(cfg.Sink, s)
			cfg.Say("%3d/%d %s %-14s %-8s %-8s total %7.1f ms, fetched %s, outside %.0f%%", step+1, cfg.ColdStarts, phase, arm,
				s.Strategy, s.How, s.TotalMS, fmtMiBytes(s.FetchedBytes), s.OutsideRatio*100)
		}
	}
	return res, res.finish(ctx, c, fc.Name)
}

// coldSample runs one cold start of arm's function (its snapshot's files
// evicted from the page cache first) and measures it.
func coldSample(ctx context.Context, c *client.Client, exp, arm, fn string, step int, phase string, event json.RawMessage) (AdaptiveSample, error) {
	return coldSampleWith(ctx, c, exp, arm, fn, "", step, phase, event)
}

// coldSampleWith is coldSample with the request naming strategy ("":
// none, the function's setting decides).
func coldSampleWith(ctx context.Context, c *client.Client, exp, arm, fn, strategy string, step int, phase string, event json.RawMessage) (AdaptiveSample, error) {
	inv, err := c.InvokeFunction(ctx, fn, event, client.InvokeOptions{EvictCache: true, Strategy: strategy})
	if err != nil {
		return AdaptiveSample{}, fmt.Errorf("%s step %d: %w", fn, step, err)
	}
	if !inv.OK {
		return AdaptiveSample{}, fmt.Errorf("%s step %d: function raised %s: %s", fn, step, inv.Error.Type, inv.Error.Message)
	}
	s := AdaptiveSample{Experiment: exp, Arm: arm, Function: fn, Step: step, Phase: phase, Strategy: inv.Strategy,
		TotalMS: inv.Timing.TotalMS, ImportMS: inv.Timing.ImportMS}
	if ch := inv.StrategyChoice; ch != nil {
		s.How = ch.How
	}
	if r := inv.Timing.Restore; r != nil {
		s.SetupMS, s.ResumeMS = r.SetupMS, r.ResumeMS
	}
	if p := inv.Process; p != nil {
		s.FetchedBytes, s.MajorFaults = p.ReadBytes, p.MajorFaults
	}
	if st := inv.StrategyStats; st != nil {
		s.FetchedBytes += st.DaemonReadBytes + st.SourceFetchedBytes
		s.SetPages, s.OutsideRatio = st.SetPages, st.SetOutsideRatio
	}
	doc, err := c.FunctionRestore(ctx, fn)
	if err == nil {
		for _, v := range doc.Versions {
			for _, r := range v.Refreshes {
				if r.State == wire.OpSucceeded && r.EndedAt.Before(time.Now()) && !r.EndedAt.IsZero() {
					s.Refreshed = true
				}
			}
		}
	}
	return s, nil
}

func (r *AdaptiveResult) add(sink io.Writer, s AdaptiveSample) {
	r.Samples = append(r.Samples, s)
	if sink != nil {
		b, _ := json.Marshal(s)
		fmt.Fprintf(sink, "%s\n", b)
	}
}

// finish summarizes the arms (auto's document included) and the targets.
func (r *AdaptiveResult) finish(ctx context.Context, c *client.Client, base string) error {
	r.Arms = map[string]ArmSummary{}
	for _, s := range r.Samples {
		a, ok := r.Arms[s.Arm]
		if !ok {
			a = ArmSummary{PhaseMS: map[string]float64{}, FetchedBytes: map[string]uint64{}, Strategies: map[string]int{}, RefreshAt: -1}
		}
		a.TotalMS += s.TotalMS
		a.PhaseMS[s.Phase] += s.TotalMS
		a.FetchedBytes[s.Phase] += s.FetchedBytes
		a.Strategies[s.Strategy]++
		if s.How == "explore" {
			a.Explorations++
		}
		if s.Refreshed && a.RefreshAt < 0 {
			a.RefreshAt = s.Step
		}
		r.Arms[s.Arm] = a
	}
	for arm, a := range r.Arms {
		a.OutsideDrift, a.OutsideAfter = r.outside(arm, a.RefreshAt)
		a.PhaseMedian = map[string]float64{}
		for _, ph := range r.phases() {
			var xs []float64
			for _, s := range r.Samples {
				if s.Arm == arm && s.Phase == ph {
					xs = append(xs, s.TotalMS)
				}
			}
			a.PhaseMedian[ph] = bench.Summarize(xs).Median
		}
		if arm == ArmAuto && base != "" {
			if doc, err := c.FunctionRestore(ctx, armFunction(base, arm)); err == nil {
				a.Restore, _ = json.Marshal(doc)
				for _, v := range doc.Versions {
					for _, l := range v.Locations {
						a.Choice = l.Choice
					}
				}
			}
		}
		r.Arms[arm] = a
	}
	best := math.Inf(1)
	for arm, a := range r.Arms {
		if arm != ArmAuto && !strings.HasSuffix(arm, refreshSuffix) && a.TotalMS < best {
			best, r.Best = a.TotalMS, arm
		}
	}
	if auto, ok := r.Arms[ArmAuto]; ok && r.Best != "" {
		r.AutoOverBest = auto.TotalMS / best
		if v, ok := r.Arms["vanilla"]; ok {
			r.DefaultOverAuto = v.TotalMS / auto.TotalMS
		}
	}
	return nil
}

// outside is an arm's median outside ratio in phase B before its refresh
// and after it (0 without samples).
func (r *AdaptiveResult) outside(arm string, refreshAt int) (drift, after float64) {
	var d, a []float64
	for _, s := range r.Samples {
		if s.Arm != arm || s.SetPages == 0 {
			continue
		}
		switch {
		case refreshAt >= 0 && s.Step >= refreshAt:
			a = append(a, s.OutsideRatio)
		case s.Phase == driftPhaseB:
			d = append(d, s.OutsideRatio)
		}
	}
	return bench.Summarize(d).Median, bench.Summarize(a).Median
}

func fmtMiBytes(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// Resummarize computes the summaries again from the samples (a report of
// an earlier run), keeping what only the daemon knew (auto's document).
func (r *AdaptiveResult) Resummarize() {
	kept := r.Arms
	_ = r.finish(context.Background(), nil, "")
	for arm, a := range r.Arms {
		if k, ok := kept[arm]; ok {
			a.Restore, a.Choice = k.Restore, k.Choice
			r.Arms[arm] = a
		}
	}
}
