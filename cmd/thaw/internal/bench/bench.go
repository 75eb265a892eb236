package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/eval"
	"github.com/thaw-dev/thaw/internal/bench/inputs"
)

func (a *app) newBenchCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("bench", "Measure thaw through its API and write results",
		`Benchmarks drive the daemon through the same API as every other command and
only emit data: JSON lines of raw samples, a JSON summary and a Markdown table.`)
	cmd.AddCommand(a.newBenchCoreCmd(), a.newBenchStrategiesCmd(), a.newBenchAdaptiveCmd(), a.newBenchMemoryCmd(), a.newBenchRestoreCmd(), a.newBenchEvalCmd(), a.newBenchReportCmd(), a.newBenchChunksCmd(), a.newBenchRemoteDiskCmd(), a.newBenchFreshCmd(),
		a.newBenchExperimentCmd(eval.ExpExec, "Execution time of every function, both record/test directions, every strategy and warm (Figures 6, 7)"),
		a.newBenchExperimentCmd(eval.ExpSize, "Cold execution time against test input size, 1/4x to 4x the record input (Figure 8)"),
		a.newBenchExperimentCmd(eval.ExpBurst, "Bursts of concurrent cold invocations from one snapshot and from copies (Figure 10)"),
		a.newBenchExperimentCmd(eval.ExpBreakdown, "Fetch time and size, page faults and bytes read per strategy (Table 3)"),
		a.newBenchExperimentCmd(eval.ExpAblation, "FaaSnap's optimization steps (Figure 9) and FaaSnap with one technique off at a time"))
	return cmd
}

// checkStrategies checks a benchmark's configuration against the daemon's
// strategies (what check refuses is a usage error) and returns the
// daemon's description.
func (a *app) checkStrategies(check func(daemonStrategies []string) error) (*client.Info, error) {
	info, err := a.C.Info(a.Ctx)
	if err != nil {
		return nil, err
	}
	if err := check(info.Strategies); err != nil {
		return nil, cli.Usagef("%v", err)
	}
	return info, nil
}

func (a *app) newBenchStrategiesCmd() *cobra.Command {
	var (
		root       string
		functions  []string
		strategies []string
		reps       int
		out        string
		readahead  int
		inputsFrom string
	)
	cmd := &cobra.Command{
		Use:   "strategies",
		Short: "Cold invocations of every function under every restore strategy, side by side",
		Long: `Prepares each function (record input A), then cold-invokes it with a
different input (B) under every strategy --reps times, evicting the
snapshot's files from the page cache before each invocation and rotating
the strategy order every repetition. Prints medians with p10-p90, page-fault
counts and storage reads, and geometric-mean ratios; with --out writes
DIR/strategies.jsonl (samples), DIR/strategies.json and DIR/strategies.md.`,
		Example: `  thaw bench strategies --reps 5 --out docs/results
  thaw bench strategies --functions hello --strategies vanilla,faasnap --reps 1`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reps < 1 {
				return cli.Usagef("--reps must be at least 1")
			}
			cases, stop, err := a.benchCases(inputsFrom, root, functions, true)
			if err != nil {
				return err
			}
			defer stop()
			info, err := a.C.Info(a.Ctx)
			if err != nil {
				return err
			}
			ra, err := bench.ReadaheadOf(info.DataDir)
			if err != nil {
				return err
			}
			kb := ra.KB()
			if readahead > 0 {
				// Host-wide and temporary: the daemon must run on this host.
				if err := ra.Set(readahead); err != nil {
					return fmt.Errorf("set read_ahead_kb: %w", err)
				}
				defer ra.Restore()
				kb = readahead
				fmt.Fprintf(a.Stderr, "[bench strategies] read_ahead_kb %d for this run (was %d)\n", readahead, ra.KB())
			}
			res, err := bench.RunStrategies(a.Ctx, a.C, cases, strategies, reps, a.Stderr)
			if err != nil {
				return err
			}
			res.ReadaheadKB = kb
			return printResults(a.App, out, "strategies", res.Samples, res, res.Markdown(), nil)
		},
	}
	cmd.Flags().StringVar(&root, "root", ".", "repository root (where functions/ is)")
	cmd.Flags().StringSliceVar(&functions, "functions", nil, "only these functions (default: hello, matmul, image)")
	cmd.Flags().StringSliceVar(&strategies, "strategies", []string{"vanilla", "cached", "reap", "faasnap"}, "strategies to compare")
	cmd.Flags().IntVar(&reps, "reps", 5, "repetitions per function and strategy")
	cmd.Flags().StringVar(&out, "out", "", "directory for the result files")
	cmd.Flags().StringVar(&inputsFrom, "inputs", "inline", "inline (hello, matmul, image with generated inputs) or redis (Table 2 inputs A/B from a Redis server on this host)")
	cmd.Flags().IntVar(&readahead, "readahead-kb", 0, "set the data disk's read_ahead_kb for the run and restore it after (0: leave it)")
	return cmd
}

// benchCases returns the cases of functions (all when there are none
// and all is set) with inputs from inputsFrom: "inline" (bench.DefaultCases)
// or "redis" (inputs A and B from a private redis-server, which stop stops).
func (a *app) benchCases(inputsFrom, root string, functions []string, all bool) (cases []bench.FunctionCase, stop func(), err error) {
	stop = func() {}
	switch inputsFrom {
	case "inline":
		for _, fc := range bench.DefaultCases(root) {
			if len(functions) == 0 && all || slices.Contains(functions, fc.Name) {
				cases = append(cases, fc)
			}
		}
	case "redis":
		if len(functions) == 0 && all {
			functions = inputs.Functions()
		}
		r, err := startInputs(a.App, functions)
		if err != nil {
			return nil, nil, err
		}
		if cases, err = bench.RedisCases(r, root, functions, "A", "B"); err != nil {
			r.Stop()
			return nil, nil, cli.Usagef("%v", err)
		}
		stop = func() { r.Stop() }
	default:
		return nil, nil, cli.Usagef("--inputs must be inline or redis")
	}
	if len(cases) == 0 {
		stop()
		return nil, nil, cli.Usagef("no function matches --functions %v", functions)
	}
	return cases, stop, nil
}

// startRedis starts an empty private redis-server on loopback. Guests reach
// it at 10.0.2.2, so the daemon must run on this host.
func startRedis(a *cli.App) (*inputs.Redis, error) {
	dir, err := os.MkdirTemp("", "thaw-redis-")
	if err != nil {
		return nil, err
	}
	return inputs.StartRedis(a.Ctx, dir)
}

// startInputs starts a private redis-server (startRedis) and loads the
// inputs of functions into it.
func startInputs(a *cli.App, functions []string) (*inputs.Redis, error) {
	r, err := startRedis(a)
	if err != nil {
		return nil, err
	}
	metas, err := inputs.Load(a.Ctx, r, functions, nil, nil)
	if err != nil {
		r.Stop()
		return nil, err
	}
	fmt.Fprintf(a.Stderr, "[bench] redis on %s with %d inputs\n", r.Addr(), len(metas))
	return r, nil
}

// printResults prints a benchmark's results: all as JSON with --json, else
// their Markdown md and, with out, writes them there (writeResults) with the
// figures (file name to SVG).
func printResults[S any](a *cli.App, out, name string, samples []S, all any, md string, figures map[string]string) error {
	if a.JSON {
		return a.PrintJSON(all)
	}
	fmt.Fprint(a.Stdout, md)
	if out == "" {
		return nil
	}
	if err := writeResults(out, name, samples, all, md); err != nil {
		return err
	}
	for file, svg := range figures {
		if err := os.WriteFile(filepath.Join(out, file), []byte(svg), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// createInDir creates the file DIR/NAME, and DIR if it is missing.
func createInDir(dir, name string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return os.Create(filepath.Join(dir, name))
}

// writeResults writes DIR/NAME.jsonl (one sample a line), DIR/NAME.json and
// DIR/NAME.md.
func writeResults[S any](dir, name string, samples []S, all any, md string) error {
	f, err := createInDir(dir, name+".jsonl")
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, s := range samples {
		if err := enc.Encode(s); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(all, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, name+".json"), b, 0o644); err != nil {
		return err
	}
	header := "# " + name + "\n\nGenerated by `thaw bench " + benchCommand(name) + "` on " + time.Now().UTC().Format(time.RFC3339) + ".\n\n"
	return os.WriteFile(filepath.Join(dir, name+".md"), []byte(header+md), 0o644)
}

func (a *app) newBenchCoreCmd() *cobra.Command {
	var (
		fnDir    string
		memories []int
		boots    int
		restores int
		out      string
		event    string
	)
	cmd := &cobra.Command{
		Use:   "core",
		Short: "Boot-to-ready, snapshot and cold-start (restore set-up, resume) times",
		Long: `Boots the function's VM --boots times (boot and snapshot samples), then
cold-invokes the last snapshot --restores times with the vanilla strategy,
for every --memory size. Prints median and p10-p90 per metric and, with --out,
writes DIR/core.jsonl (samples), DIR/core.json and DIR/core.md.`,
		Example: `  thaw bench core --dir functions/hello --memory 256,512 --restores 10 --out docs/results`,
		Args:    cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !json.Valid([]byte(event)) {
				return cli.Usagef("--event is not valid JSON")
			}
			var results []*bench.CoreResult
			for _, mem := range memories {
				r, err := bench.RunCore(a.Ctx, a.C, bench.CoreConfig{Function: filepath.Base(fnDir), Dir: fnDir,
					MemoryMiB: mem, Boots: boots, Restores: restores, Event: json.RawMessage(event)}, a.Stderr)
				if err != nil {
					return err
				}
				results = append(results, r)
			}
			var samples []bench.CoreSample
			for _, r := range results {
				samples = append(samples, r.Samples...)
			}
			return printResults(a.App, out, "core", samples, results, bench.CoreMarkdown(results), nil)
		},
	}
	cmd.Flags().StringVar(&fnDir, "dir", "functions/hello", "function directory to measure")
	cmd.Flags().IntSliceVar(&memories, "memory", []int{512}, "guest memory sizes in MiB")
	cmd.Flags().IntVar(&boots, "boots", 3, "VMs to boot per memory size")
	cmd.Flags().IntVar(&restores, "restores", 10, "cold invocations per memory size")
	cmd.Flags().StringVar(&out, "out", "", "directory for core.jsonl, core.json and core.md")
	cmd.Flags().StringVar(&event, "event", `{"name":"bench"}`, "event for the cold invocations")
	return cmd
}
