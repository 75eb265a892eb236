package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/eval"
)

// evalFlags are the flags every evaluation command shares.
type evalFlags struct {
	cfg         eval.EvalConfig
	experiments []string
	out         string
	estimate    bool
	timeout     time.Duration
	readahead   int
	storage     string
}

func (f *evalFlags) register(cmd *cobra.Command, withExperiments bool) {
	def := eval.DefaultEvalConfig(".")
	f.cfg = def
	fl := cmd.Flags()
	if withExperiments {
		fl.StringSliceVar(&f.experiments, "experiments", def.Experiments, "experiments to run: "+strings.Join(eval.Experiments, ", "))
	}
	fl.StringVar(&f.cfg.Root, "root", ".", "repository root (where functions/ is)")
	fl.StringSliceVar(&f.cfg.Functions, "functions", nil, "only these functions (filters every experiment's list)")
	fl.StringSliceVar(&f.cfg.ExecFunctions, "exec-functions", def.ExecFunctions, "functions of the execution-time experiment")
	fl.StringSliceVar(&f.cfg.SizeFunctions, "size-functions", def.SizeFunctions, "functions of the input-size experiment")
	fl.StringSliceVar(&f.cfg.BurstFunctions, "burst-functions", def.BurstFunctions, "functions of the burst experiment")
	fl.StringSliceVar(&f.cfg.BreakdownFunctions, "breakdown-functions", def.BreakdownFunctions, "functions of the breakdown (Table 3)")
	fl.StringSliceVar(&f.cfg.AblationFunctions, "ablation-functions", def.AblationFunctions, "functions of the ablation (FaaSnap with techniques off)")
	fl.StringVar(&f.cfg.Figure9Function, "figure9-function", def.Figure9Function, "ablation function also measured in Figure 9's steps (vanilla, concurrent paging, per-region mapping)")
	fl.StringSliceVar(&f.cfg.Strategies, "strategies", nil, "cold restore strategies (default: every strategy the daemon offers, from /v1/info)")
	fl.BoolVar(&f.cfg.NoWarm, "no-warm", false, "skip the warm baseline of the execution-time experiment")
	fl.IntVar(&f.cfg.Reps, "reps", def.Reps, "repetitions of every measurement")
	fl.Float64SliceVar(&f.cfg.Ratios, "ratios", def.Ratios, "test input sizes relative to input A (input-size experiment)")
	fl.IntSliceVar(&f.cfg.BurstSizes, "burst-sizes", def.BurstSizes, "concurrent cold invocations per burst")
	fl.StringSliceVar(&f.cfg.BurstModes, "burst-modes", def.BurstModes, "same (one snapshot) and/or different (a copy of the snapshot per invocation)")
	fl.DurationVar(&f.timeout, "invoke-timeout", def.Timeout, "timeout of one invocation or prepare")
	fl.StringVar(&f.out, "out", "", "directory for eval.jsonl, eval.json, eval.md and the SVG figures")
	fl.BoolVar(&f.estimate, "estimate", false, "print what the run would do and how long it should take, and stop")
	fl.StringVar(&f.storage, "storage", "", "directory describing the data directory's storage when it is not the local disk (storage.json and fio-*.json, as scripts/remote-storage.sh writes them), recorded in the results")
	fl.IntVar(&f.readahead, "readahead-kb", 128, "the data disk's read_ahead_kb for the run, restored after: 128 is Linux's default and the paper's (0: leave the host's)")
}

const evalLong = `Reproduces FaaSnap's evaluation (EuroSys'22, section 6) through the
daemon's API:

  exec       Figures 6 and 7: every function, record A / test B and record B /
             test A, under every cold strategy (snapshot files evicted from the
             page cache first) and warm (a running VM that ran the function).
  size       Figure 8: record A, test with B's content at 1/4x..4x A's size.
  burst      Figure 10: 1..16 concurrent cold invocations from one snapshot
             and from as many copies of it (POST /v1/snapshots/{id}/copy).
  breakdown  Table 3: fetch time and size, QEMU's page faults, bytes read by
             QEMU and by the daemon (from exec's samples when exec ran).
  ablation   Figure 9 (section 6.5) on --figure9-function: vanilla,
             concurrent paging alone, per-region mapping, all of FaaSnap;
             and all of FaaSnap with one technique off in turn (loading-set
             file, host page recording, freed-page filtering, merging) on
             every --ablation-functions function. Not run unless named;
             start thawd with --fault-trace-object for traced counters.

Inputs come from a redis-server the command starts on loopback (guests reach
it at 10.0.2.2), so the daemon must run on this host. Each function is
prepared once per record input and shared by the experiments. The run prints
an estimate of its duration first and a progress line per invocation; with
--out it writes raw samples (eval.jsonl), summaries (eval.json), tables
(eval.md) and figures (*.svg). Long runs need a larger --timeout (the whole
command's), e.g. --timeout 12h.`

func (a *app) newBenchEvalCmd() *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   "eval",
		Short: "The whole evaluation: execution time, input size, bursts, breakdown",
		Long:  evalLong,
		Example: `  thaw --timeout 12h bench eval --out docs/results/eval
  thaw bench eval --experiments exec,burst --functions hello,json --strategies vanilla,faasnap --reps 1
  thaw bench eval --estimate`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runEval(&f, f.experiments) },
	}
	f.register(cmd, true)
	return cmd
}

// newBenchExperimentCmd is one experiment alone (thaw bench exec, ...).
func (a *app) newBenchExperimentCmd(exp, short string) *cobra.Command {
	var f evalFlags
	cmd := &cobra.Command{
		Use:   exp,
		Short: short,
		Long:  short + ". The experiment of 'thaw bench eval --experiments " + exp + "'; see 'thaw bench eval --help'.",
		Example: fmt.Sprintf("  thaw --timeout 6h bench %s --out docs/results/%s\n  thaw bench %s --functions hello,json --reps 1",
			exp, exp, exp),
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error { return a.runEval(&f, []string{exp}) },
	}
	f.register(cmd, false)
	return cmd
}

func (a *app) runEval(f *evalFlags, experiments []string) error {
	cfg := f.cfg
	cfg.Experiments = experiments
	cfg.Timeout = f.timeout
	if cfg.Root == "" {
		cfg.Root = "."
	}
	if f.storage != "" {
		st, err := bench.LoadStorage(f.storage)
		if err != nil {
			return cli.Usagef("--storage: %v", err)
		}
		cfg.Storage = st
	}
	info, err := a.checkStrategies(cfg.Resolve)
	if err != nil {
		return err
	}
	est := eval.EstimateEval(cfg)
	if f.estimate {
		fmt.Fprintf(a.Stdout, "experiments %s; strategies %s; %d repetitions\n", strings.Join(cfg.Experiments, ","), strings.Join(cfg.Strategies, ","), cfg.Reps)
		fmt.Fprintf(a.Stdout, "%d prepares, %d cold starts, %d warm invocations, %d snapshot copies: about %s\n",
			est.Prepares, est.Cold, est.Warm, est.Copies, est.Duration().Round(time.Minute))
		return nil
	}
	if f.readahead > 0 {
		// Host-wide and temporary: the daemon must run on this host.
		ra, err := bench.ReadaheadOf(info.DataDir)
		if err != nil {
			return err
		}
		if err := ra.Set(f.readahead); err != nil {
			return fmt.Errorf("set read_ahead_kb: %w", err)
		}
		defer ra.Restore()
		fmt.Fprintf(a.Stderr, "[bench] read_ahead_kb %d for this run (was %d)\n", f.readahead, ra.KB())
	}
	if est.Duration() > a.Timeout {
		fmt.Fprintf(a.Stderr, "[bench] warning: the run is estimated at %s but --timeout is %s\n", est.Duration().Round(time.Minute), a.Timeout)
	}
	var fns []string
	for _, e := range cfg.Experiments {
		for _, fn := range map[string][]string{eval.ExpExec: cfg.ExecFunctions, eval.ExpSize: cfg.SizeFunctions,
			eval.ExpBurst: cfg.BurstFunctions, eval.ExpBreakdown: cfg.BreakdownFunctions, eval.ExpAblation: cfg.AblationFunctions}[e] {
			fns = append(fns, fn)
		}
	}
	if len(fns) == 0 {
		return cli.Usagef("no function left to run after --functions %v", cfg.Functions)
	}
	if f.out != "" {
		// Samples stream into the JSON lines file as they are measured;
		// WriteEval rewrites it (same content) with the rest at the end.
		sink, err := createInDir(f.out, "eval.jsonl")
		if err != nil {
			return err
		}
		defer sink.Close()
		cfg.Sink = sink
	}
	r, err := startRedis(a.App) // RunEval loads the inputs it needs
	if err != nil {
		return err
	}
	defer r.Stop()
	fmt.Fprintf(a.Stderr, "[bench] redis on %s\n", r.Addr())
	res, runErr := eval.RunEval(a.Ctx, a.C, r, cfg, a.Stderr)
	if res == nil {
		return runErr
	}
	return a.finishRun(res, runErr, f.out, func(dir string) ([]string, error) { return eval.WriteEval(dir, res) }, res.Markdown)
}

// finishRun ends a benchmark run: its JSON with --json; else its files
// written into out (if set), then the run's error or its tables.
func (a *app) finishRun(res any, runErr error, out string, write func(dir string) ([]string, error), markdown func() string) error {
	if a.JSON && runErr == nil {
		return a.PrintJSON(res)
	}
	if out != "" {
		paths, err := write(out)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintf(a.Stderr, "[bench] wrote %s\n", filepath.Clean(p))
		}
	}
	if runErr != nil {
		return runErr
	}
	fmt.Fprint(a.Stdout, markdown())
	return nil
}

func (a *app) newBenchReportCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "report DIR",
		Short: "Recompute the tables and figures of an evaluation run from its samples",
		Long: `Reads DIR/eval.json and DIR/eval.jsonl (written by 'thaw bench eval --out
DIR'), recomputes every summary from the samples and writes eval.json,
eval.md and the SVG figures again, into --out (default DIR). A directory of
'thaw bench restore' (restore.json, restore.jsonl) is recomputed the same
way. Needs no daemon.`,
		Example: "  thaw bench report docs/results/eval-20261122-0500",
		Args:    cli.ExactArgs("DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				out = args[0]
			}
			if _, err := os.Stat(filepath.Join(args[0], "restore.json")); err == nil {
				return a.reportRestore(args[0], out)
			}
			res, err := eval.ReadEval(args[0])
			if err != nil {
				return err
			}
			return a.finishRun(res, nil, out, func(dir string) ([]string, error) { return eval.WriteEval(dir, res) }, res.Markdown)
		},
	}
	cmd.Flags().StringVar(&out, "out", "", "directory to write into (default: DIR)")
	return cmd
}
