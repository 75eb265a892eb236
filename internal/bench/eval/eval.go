package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/inputs"
)

// The experiments of FaaSnap's evaluation (§6) that thaw reproduces.
const (
	ExpExec      = "exec"      // Figures 6 and 7: every function, record A/test B and record B/test A
	ExpSize      = "size"      // Figure 8: record A, test 1/4x .. 4x of A's size
	ExpBurst     = "burst"     // Figure 10: N concurrent cold starts, same or different snapshots
	ExpBreakdown = "breakdown" // Table 3: fetch time and size, faults, bytes read
)

// Experiments lists every experiment, in the order a run does them.
var Experiments = []string{ExpExec, ExpSize, ExpBurst, ExpBreakdown, ExpAblation}

// DefaultExperiments are those a run does unless told: the paper's
// comparison of strategies (the ablation is asked for by name).
var DefaultExperiments = []string{ExpExec, ExpSize, ExpBurst, ExpBreakdown}

// Warm is the pseudo-strategy of the execution-time experiment: the same
// invocation on a VM that is already running and has run the function.
const Warm = "warm"

// Burst modes: every invocation of a burst restores the same snapshot, or
// each its own copy (distinct files, so no page-cache sharing).
const (
	BurstSame      = "same"
	BurstDifferent = "different"
)

// EvalConfig selects what an evaluation run measures.
type EvalConfig struct {
	Root        string   `json:"-"` // repository root (functions/)
	Experiments []string `json:"experiments"`
	// Functions filters every experiment's default function list; the
	// per-experiment lists below, when set, are used as they are.
	Functions          []string `json:"functions,omitempty"`
	ExecFunctions      []string `json:"exec_functions"`
	SizeFunctions      []string `json:"size_functions"`
	BurstFunctions     []string `json:"burst_functions"`
	BreakdownFunctions []string `json:"breakdown_functions"`
	AblationFunctions  []string `json:"ablation_functions,omitempty"`
	// Figure9Function is the ablation function whose Figure 9 steps
	// (vanilla, concurrent paging, per-region mapping) are measured too.
	Figure9Function string    `json:"figure9_function,omitempty"`
	Strategies      []string  `json:"strategies"` // cold strategies; empty: the daemon's /v1/info list
	NoWarm          bool      `json:"no_warm,omitempty"`
	Reps            int       `json:"reps"`
	Ratios          []float64 `json:"input_ratios"`
	BurstSizes      []int     `json:"burst_sizes"`
	BurstModes      []string  `json:"burst_modes"`
	// Timeout bounds one invocation (a burst of 16 under TCG is slow).
	Timeout time.Duration `json:"-"`
	// Storage describes the data directory's storage when it is not the
	// local disk (recorded in the result).
	Storage *bench.Storage `json:"-"`
	// Sink, if set, receives every sample as a JSON line as soon as it is
	// measured, so an interrupted run keeps what it measured.
	Sink io.Writer `json:"-"`
}

// DefaultEvalConfig is the full evaluation.
func DefaultEvalConfig(root string) EvalConfig {
	return EvalConfig{Root: root, Experiments: DefaultExperiments,
		AblationFunctions: []string{"hello", "json", "image", "matmul"}, Figure9Function: "image",
		ExecFunctions:      inputs.Functions(),
		SizeFunctions:      []string{"image", "json", "matmul", "pagerank"},
		BurstFunctions:     []string{"hello", "json"},
		BreakdownFunctions: []string{"image", "pagerank"},
		Reps:               5, Ratios: []float64{0.25, 0.5, 1, 2, 4}, BurstSizes: []int{1, 2, 4, 8, 16},
		BurstModes: []string{BurstSame, BurstDifferent}, Timeout: 10 * time.Minute}
}

// Resolve applies the Functions filter and checks the configuration;
// strategies are the daemon's when none were asked for.
func (c *EvalConfig) Resolve(daemonStrategies []string) error {
	if c.Reps < 1 {
		return fmt.Errorf("reps must be at least 1, got %d", c.Reps)
	}
	for _, e := range c.Experiments {
		if !slices.Contains(Experiments, e) {
			return fmt.Errorf("unknown experiment %q (known: %s)", e, strings.Join(Experiments, ", "))
		}
	}
	if len(c.Strategies) == 0 {
		c.Strategies = slices.Clone(daemonStrategies)
	}
	for _, s := range c.Strategies {
		if !slices.Contains(daemonStrategies, s) {
			return fmt.Errorf("strategy %q is not one of the daemon's (%s)", s, strings.Join(daemonStrategies, ", "))
		}
	}
	if c.has(ExpAblation) {
		// faasnap and its variants; no-hostrec needs reap's recording;
		// Figure 9 starts from vanilla.
		for _, s := range []string{"vanilla", "reap", "faasnap"} {
			if !slices.Contains(daemonStrategies, s) {
				return fmt.Errorf("the ablation needs strategy %s, which the daemon does not offer (%s)", s, strings.Join(daemonStrategies, ", "))
			}
		}
	}
	for _, m := range c.BurstModes {
		if m != BurstSame && m != BurstDifferent {
			return fmt.Errorf("burst mode %q: want %s or %s", m, BurstSame, BurstDifferent)
		}
	}
	if len(c.Functions) > 0 {
		for _, f := range c.Functions {
			if _, ok := inputs.Lookup(f); !ok {
				return fmt.Errorf("unknown function %q (known: %s)", f, strings.Join(inputs.Functions(), ", "))
			}
		}
		keep := func(l []string) []string {
			return slices.DeleteFunc(slices.Clone(l), func(f string) bool { return !slices.Contains(c.Functions, f) })
		}
		c.ExecFunctions, c.SizeFunctions = keep(c.ExecFunctions), keep(c.SizeFunctions)
		c.BurstFunctions, c.BreakdownFunctions = keep(c.BurstFunctions), keep(c.BreakdownFunctions)
		c.AblationFunctions = keep(c.AblationFunctions)
	}
	for _, r := range c.Ratios {
		if r < inputs.MinScale || r > inputs.MaxScale {
			return fmt.Errorf("input ratio %g outside %g..%g", r, inputs.MinScale, inputs.MaxScale)
		}
	}
	for _, n := range c.BurstSizes {
		if n < 1 || n > 64 {
			return fmt.Errorf("burst size %d outside 1..64", n)
		}
	}
	return nil
}

func (c *EvalConfig) has(exp string) bool { return slices.Contains(c.Experiments, exp) }

// functionsOf returns the functions an experiment runs.
func (c *EvalConfig) functionsOf(exp string) []string {
	switch exp {
	case ExpExec:
		return c.ExecFunctions
	case ExpSize:
		return c.SizeFunctions
	case ExpBurst:
		return c.BurstFunctions
	case ExpBreakdown:
		return c.BreakdownFunctions
	case ExpAblation:
		return c.AblationFunctions
	}
	return nil
}

// EvalSample is one invocation (one JSON line of the raw samples).
type EvalSample struct {
	Experiment string `json:"experiment"`
	// Record and Test name the inputs: "A", "B", or "B×0.25" for the size
	// experiment's scaled inputs.
	Record     string  `json:"record"`
	Test       string  `json:"test"`
	InputRatio float64 `json:"input_ratio,omitempty"` // size experiment: test size / A's size
	Burst      int     `json:"burst,omitempty"`       // burst size
	BurstMode  string  `json:"burst_mode,omitempty"`  // same or different snapshots
	Slot       int     `json:"slot,omitempty"`        // index within the burst
	Snapshot   string  `json:"snapshot,omitempty"`
	Variant    string  `json:"variant,omitempty"` // the strategy's variant (ablation)
	// WallMS is the client's time from the start of the burst (or of the
	// request) to this invocation's answer.
	WallMS     float64 `json:"wall_ms"`
	FetchMS    float64 `json:"fetch_ms,omitempty"`    // the strategy's prefetch, loader or cache-fill time
	FetchBytes uint64  `json:"fetch_bytes,omitempty"` // and what it read
	// Trace is the daemon's tracepoint counters (thawd --fault-trace-object).
	Trace *client.FaultTrace `json:"trace,omitempty"`
	bench.StrategySample
}

// preparedKey names a prepared snapshot: function and record variant.
type preparedKey struct{ fn, variant string }

// evalRun is one evaluation run in progress.
type evalRun struct {
	c        *client.Client
	info     *client.Info
	cfg      EvalConfig
	redis    *inputs.Redis
	prog     *Progress
	res      *EvalResult
	prepared map[preparedKey]*client.PrepareResult
	created  map[string]bool
}

// RunEval runs the configured experiments against the daemon behind c, with
// the inputs in r (RunEval loads them). Prepared snapshots are reused within
// the run: each function is prepared once per record input.
func RunEval(ctx context.Context, c *client.Client, r *inputs.Redis, cfg EvalConfig, progress io.Writer) (*EvalResult, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	if err := cfg.Resolve(info.Strategies); err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	run := &evalRun{c: c, info: info, cfg: cfg, redis: r,
		res:      &EvalResult{Machine: bench.DescribeMachine(info), When: time.Now().UTC(), Config: cfg, Prepared: map[string]json.RawMessage{}},
		prepared: map[preparedKey]*client.PrepareResult{}, created: map[string]bool{}}
	if ra, err := bench.ReadaheadOf(info.DataDir); err == nil {
		run.res.ReadaheadKB = ra.KB()
	}
	if st := cfg.Storage; st != nil {
		run.res.Storage = st
		for _, s := range bench.StoreUsers(info, cfg.Strategies) {
			run.res.Notes = append(run.res.Notes, s+" maps its copy in the snapshot memory store (host memory: tmpfs unless the run chose another tier), not the snapshot on the "+st.Kind+" storage: only placing the copy in the store reads that storage.")
		}
	}
	est := EstimateEval(cfg)
	run.prog = NewProgress(progress, est)
	warm := ""
	if cfg.has(ExpExec) && !cfg.NoWarm {
		warm = " + warm"
	}
	run.prog.Say("experiments %s; strategies %s%s; %d repetitions; estimated duration %s (%d prepares, %d cold starts, %d warm invocations, %d snapshot copies)",
		strings.Join(cfg.Experiments, ", "), strings.Join(cfg.Strategies, ", "), warm, cfg.Reps,
		est.Duration().Round(time.Minute), est.Prepares, est.Cold, est.Warm, est.Copies)
	if err := run.loadInputs(ctx); err != nil {
		return nil, err
	}
	start := time.Now()
	steps := []struct {
		exp string
		run func(context.Context) error
	}{{ExpExec, run.exec}, {ExpSize, run.size}, {ExpBurst, run.burst}, {ExpBreakdown, run.breakdown}, {ExpAblation, run.ablation}}
	for _, st := range steps {
		if !cfg.has(st.exp) {
			continue
		}
		if len(cfg.functionsOf(st.exp)) == 0 {
			run.res.Notes = append(run.res.Notes, fmt.Sprintf("%s: skipped, no function left after the filter", st.exp))
			run.prog.Say("%s: skipped (no function left after the filter)", st.exp)
			continue
		}
		if err := st.run(ctx); err != nil {
			run.res.DurationS = time.Since(start).Seconds()
			run.res.Summarize()
			return run.res, fmt.Errorf("%s: %w", st.exp, err)
		}
	}
	run.res.DurationS = time.Since(start).Seconds()
	run.res.Summarize()
	run.prog.Say("done in %s (estimated %s)", time.Since(start).Round(time.Second), est.Duration().Round(time.Minute))
	return run.res, nil
}

// loadInputs puts every input the run needs into Redis: Table 2's A and B
// of every function, and B's content at every ratio for the size experiment.
func (r *evalRun) loadInputs(ctx context.Context) error {
	var all []string
	for _, e := range r.cfg.Experiments {
		for _, f := range r.cfg.functionsOf(e) {
			if !slices.Contains(all, f) {
				all = append(all, f)
			}
		}
	}
	if _, err := inputs.Load(ctx, r.redis, all, nil, nil); err != nil {
		return err
	}
	if r.cfg.has(ExpSize) && len(r.cfg.SizeFunctions) > 0 {
		if _, err := inputs.Load(ctx, r.redis, r.cfg.SizeFunctions, []string{"B"}, r.cfg.Ratios); err != nil {
			return err
		}
	}
	return nil
}

// event is the invocation event of fn's input variant at scale (0: the
// variant's Table 2 size).
func (r *evalRun) event(fn, variant string, scale float64) (json.RawMessage, error) {
	if scale == 0 {
		s, err := inputs.NominalScale(fn, variant)
		if err != nil {
			return nil, err
		}
		scale = s
	}
	return json.Marshal(r.redis.Event(inputs.Key(fn, variant, scale)))
}

// prepare returns fn's warm snapshot recorded with variant's input,
// creating the function and preparing it the first time.
func (r *evalRun) prepare(ctx context.Context, fn, variant string) (*client.PrepareResult, error) {
	k := preparedKey{fn, variant}
	if pr, ok := r.prepared[k]; ok {
		return pr, nil
	}
	if !r.created[fn] {
		if _, err := r.c.GetFunction(ctx, fn); err != nil {
			if _, err := r.c.CreateFunctionFromDir(ctx, fn, filepath.Join(r.cfg.Root, "functions", fn), memoryOf(fn), 1,
				client.WithServices(r.redis.Addr())); err != nil {
				return nil, fmt.Errorf("create %s: %w", fn, err)
			}
		}
		r.created[fn] = true
	}
	ev, err := r.event(fn, variant, 0)
	if err != nil {
		return nil, err
	}
	r.prog.Say("%s: prepare with input %s (boot, clean snapshot, record, warm snapshot, artifacts)", fn, variant)
	t0 := time.Now()
	// The ablation's functions also get FaaSnap's technique-off artifacts.
	variants := r.cfg.has(ExpAblation) && slices.Contains(r.cfg.AblationFunctions, fn)
	pr, err := r.c.Prepare(ctx, fn, ev, client.PrepareOptions{Timeout: r.cfg.Timeout, FaaSnapVariants: variants})
	if err != nil {
		return nil, fmt.Errorf("prepare %s with %s: %w", fn, variant, err)
	}
	r.prog.Done(estPrep(fn), "%s: prepared with %s in %s: warm snapshot %s", fn, variant, time.Since(t0).Round(time.Second), pr.Warm.ID)
	if err := r.stage(ctx, pr.Warm.ID); err != nil {
		return nil, fmt.Errorf("%s: %w", fn, err)
	}
	b, _ := json.Marshal(pr)
	r.prepared[k] = pr
	r.res.Prepared[fn+"/"+variant] = b
	return pr, nil
}

// recordATestB is fn prepared with input A and the event of input B.
func (r *evalRun) recordATestB(ctx context.Context, fn string) (*client.PrepareResult, json.RawMessage, error) {
	pr, err := r.prepare(ctx, fn, "A")
	if err != nil {
		return nil, nil, err
	}
	ev, err := r.event(fn, "B", 0)
	return pr, ev, err
}

// stage does what strategies need beyond prepare: a strategy that maps the
// snapshot from the memory store (premap) has it placed there (its copy
// lives in DRAM or persistent memory by design, so cold tests cannot evict
// it).
func (r *evalRun) stage(ctx context.Context, snap string) error {
	s := bench.StoreUsers(r.info, r.cfg.Strategies)
	if len(s) == 0 {
		return nil
	}
	if _, err := r.c.StoreSnapshot(ctx, snap); err != nil {
		return fmt.Errorf("store %s for %s: %w", snap, strings.Join(s, ", "), err)
	}
	return nil
}

// memoryOf is the guest memory of a function (as RedisCases).
func memoryOf(fn string) int {
	if fn == "hello" {
		return 256
	}
	return 512
}

// cold runs one cold invocation of snap under strategy (and its variant,
// if any) with the snapshot's files evicted from the page cache first.
func (r *evalRun) cold(ctx context.Context, base EvalSample, snap, strategy, variant string, ev json.RawMessage, evict bool) (EvalSample, error) {
	t0 := time.Now()
	inv, err := r.c.InvokeSnapshot(ctx, snap, ev, client.InvokeOptions{Strategy: strategy, Variant: variant, EvictCache: evict, Timeout: r.cfg.Timeout})
	wall := time.Since(t0)
	if err != nil {
		return EvalSample{}, fmt.Errorf("%s/%s: %w", base.Function, strategy, err)
	}
	if !inv.OK {
		return EvalSample{}, fmt.Errorf("%s/%s: function raised %s: %s", base.Function, strategy, inv.Error.Type, inv.Error.Message)
	}
	if inv.Strategy != strategy {
		fb := ""
		if inv.StrategyStats != nil {
			fb = inv.StrategyStats.Fallback
		}
		return EvalSample{}, fmt.Errorf("%s/%s ran as %s: %s", base.Function, strategy, inv.Strategy, fb)
	}
	if variant != "" && (inv.StrategyStats == nil || inv.StrategyStats.PartValues()["variant"] != variant) {
		return EvalSample{}, fmt.Errorf("%s/%s: variant %q did not run", base.Function, strategy, variant)
	}
	return fill(base, strategy, snap, wall, inv), nil
}

// fill completes a sample from an invocation.
func fill(base EvalSample, strategy, snap string, wall time.Duration, inv *client.Invocation) EvalSample {
	s := base
	s.StrategySample = bench.SampleOf(base.Function, strategy, base.Rep, inv)
	s.Snapshot, s.WallMS, s.Trace = snap, float64(wall.Microseconds())/1000, inv.Trace
	if st := inv.StrategyStats; st != nil {
		// What the strategy fetched ahead (its fetch_ms and fetch_bytes):
		// REAP's prefetch, FaaSnap's loader, cached's fill of the page
		// cache (before the request's timer starts), premap's pre-faulting
		// of the store copy (mapped, not read) or snapbpf's in-kernel
		// readahead until every captured page was resident.
		s.FetchMS, s.FetchBytes = st.FetchMS, st.FetchBytes
	}
	return s
}

func (r *evalRun) add(s EvalSample, est float64) {
	r.res.Samples = append(r.res.Samples, s)
	if r.cfg.Sink != nil {
		b, _ := json.Marshal(s)
		_, _ = r.cfg.Sink.Write(append(b, '\n'))
	}
	extra := ""
	if s.Burst > 0 {
		extra = fmt.Sprintf(" burst %d/%s slot %d", s.Burst, s.BurstMode, s.Slot)
	}
	r.prog.Done(est, "%-9s %-11s %s→%-7s %-8s rep %d%s: total %7.1f ms (setup %6.1f, resume %7.1f, invoke %7.1f), %d major faults",
		s.Experiment, s.Function, s.Record, s.Test, Arm{s.Strategy, s.Variant}.Label(), s.Rep, extra, s.TotalMS, s.SetupMS, s.ResumeMS, s.InvokeMS, s.MajorFaults)
}

// exec is Figures 6 and 7: every function in both directions, every
// strategy cold plus warm.
func (r *evalRun) exec(ctx context.Context) error {
	for _, fn := range r.cfg.ExecFunctions {
		for _, dir := range [][2]string{{"A", "B"}, {"B", "A"}} {
			if err := r.execOne(ctx, ExpExec, fn, dir[0], dir[1], !r.cfg.NoWarm); err != nil {
				if err := r.failed(ctx, ExpExec, fn, err); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// execOne measures fn recorded with rec and tested with tst: reps rounds of
// cold invocations under every strategy (order rotated every round), then,
// if warm, the same invocation on one running VM.
func (r *evalRun) execOne(ctx context.Context, exp, fn, rec, tst string, warm bool) error {
	pr, err := r.prepare(ctx, fn, rec)
	if err != nil {
		return err
	}
	ev, err := r.event(fn, tst, 0)
	if err != nil {
		return err
	}
	ss := r.cfg.Strategies
	for rep := 0; rep < r.cfg.Reps; rep++ {
		for i := range ss {
			s := ss[(i+rep)%len(ss)]
			base := EvalSample{Experiment: exp, Record: rec, Test: tst, StrategySample: bench.StrategySample{Function: fn, Rep: rep}}
			smp, err := r.cold(ctx, base, pr.Warm.ID, s, "", ev, true)
			if err != nil {
				return err
			}
			r.add(smp, estCold(fn, 1))
		}
	}
	if !warm {
		return nil
	}
	return r.warm(ctx, exp, fn, rec, tst, pr.Warm.ID, ev)
}

// warm restores one VM from the warm snapshot, runs the test invocation
// once untimed (so the VM "has run the function before" with this input),
// then reps timed invocations on it, and deletes the VM.
func (r *evalRun) warm(ctx context.Context, exp, fn, rec, tst, snap string, ev json.RawMessage) error {
	vm, err := r.c.RestoreVM(ctx, snap, "vanilla")
	if err != nil {
		return fmt.Errorf("%s/warm: restore: %w", fn, err)
	}
	defer r.c.DeleteVM(context.WithoutCancel(ctx), vm.ID)
	if _, err := r.c.InvokeVM(ctx, vm.ID, ev, client.InvokeOptions{Timeout: r.cfg.Timeout}); err != nil {
		return fmt.Errorf("%s/warm: first invocation: %w", fn, err)
	}
	for rep := 0; rep < r.cfg.Reps; rep++ {
		t0 := time.Now()
		inv, err := r.c.InvokeVM(ctx, vm.ID, ev, client.InvokeOptions{Timeout: r.cfg.Timeout})
		wall := time.Since(t0)
		if err != nil {
			return fmt.Errorf("%s/warm: %w", fn, err)
		}
		if !inv.OK {
			return fmt.Errorf("%s/warm: function raised %s: %s", fn, inv.Error.Type, inv.Error.Message)
		}
		base := EvalSample{Experiment: exp, Record: rec, Test: tst, StrategySample: bench.StrategySample{Function: fn, Rep: rep}}
		r.add(fill(base, Warm, "", wall, inv), estWarm(fn))
	}
	return nil
}

// size is Figure 8: record with A, test with B's content at each ratio of
// A's size.
func (r *evalRun) size(ctx context.Context) error {
	return r.perFunction(ctx, ExpSize, r.cfg.SizeFunctions, r.sizeOf)
}

func (r *evalRun) sizeOf(ctx context.Context, fn string) error {
	ss := r.cfg.Strategies
	pr, err := r.prepare(ctx, fn, "A")
	if err != nil {
		return err
	}
	for rep := 0; rep < r.cfg.Reps; rep++ {
		for _, ratio := range r.cfg.Ratios {
			ev, err := r.event(fn, "B", ratio)
			if err != nil {
				return err
			}
			for i := range ss {
				s := ss[(i+rep)%len(ss)]
				base := EvalSample{Experiment: ExpSize, Record: "A", Test: "B×" + bench.FormatRatio(ratio), InputRatio: ratio,
					StrategySample: bench.StrategySample{Function: fn, Rep: rep}}
				smp, err := r.cold(ctx, base, pr.Warm.ID, s, "", ev, true)
				if err != nil {
					return err
				}
				r.add(smp, estCold(fn, ratio))
			}
		}
	}
	return nil
}

// perFunction runs one experiment's measure for each of fns; a function
// that fails is noted (failed) and the next one runs.
func (r *evalRun) perFunction(ctx context.Context, exp string, fns []string, measure func(context.Context, string) error) error {
	for _, fn := range fns {
		if err := measure(ctx, fn); err != nil {
			if err := r.failed(ctx, exp, fn, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// failed records that an experiment could not finish a function and lets
// the run go on with the next one (a long unattended run should not lose
// everything to one function); a cancelled run stops.
func (r *evalRun) failed(ctx context.Context, exp, fn string, err error) error {
	if ctx.Err() != nil {
		return err
	}
	r.res.Notes = append(r.res.Notes, fmt.Sprintf("%s: %s incomplete: %v", exp, fn, err))
	r.prog.Say("ERROR %s %s: %v (continuing with the next function)", exp, fn, err)
	return nil
}

// breakdown is Table 3. It reuses the exec experiment's record A/test B
// samples of a function when that ran in this run; otherwise it measures
// them (cold, every strategy, reps rounds).
func (r *evalRun) breakdown(ctx context.Context) error {
	return r.perFunction(ctx, ExpBreakdown, r.cfg.BreakdownFunctions, func(ctx context.Context, fn string) error {
		if r.cfg.has(ExpExec) && slices.Contains(r.cfg.ExecFunctions, fn) {
			r.prog.Say("breakdown %s: from the exec experiment's record A / test B samples", fn)
			return nil
		}
		return r.execOne(ctx, ExpBreakdown, fn, "A", "B", false)
	})
}
