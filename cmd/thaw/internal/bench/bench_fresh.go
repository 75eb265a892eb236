package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench/fresh"
)

func (a *app) newBenchFreshCmd() *cobra.Command {
	var (
		root, out, inputsFrom string
		functions             []string
		concurrency           []int
		rounds                int
		trace                 = fresh.DefaultTrace
		report                bool
	)
	cmd := &cobra.Command{
		Use:   "fresh",
		Short: "Ready clones: a hit beside a miss, keep-alive and warm, their memory and refills, and a trace's hit rate",
		Long: `Measures ready clones (thawd --standby-memory) the way a user sees them.
For each function and each --concurrency N: bursts of N requests by name
once N ready clones wait (ready hit; the time from a burst's first take to
N ready clones again, none of them one it took, is the refill), N cold
restores of its snapshot (ready miss), N requests served by VMs kept after
the hits (keep-alive, the ready clones stopped first) and N calls on as
many running VMs (warm); the memory of each ready clone's VMM (RSS, PSS,
anonymous) beside what the daemon counts it against --standby-memory (the
VM listing's ready_memory_mib). Then a trace: Poisson arrivals with bursts,
from a seed (the same requests every run), each request sent when it
arrives, with the share a ready clone served against the ready clones kept
(and the MiB the daemon counted them) and the mean concurrent demand.

Writes DIR/fresh.jsonl (samples), fresh.json, fresh.md and SVG plots.`,
		Example: `  thaw bench fresh --out docs/results/fresh
  thaw bench fresh --inputs redis --concurrency 1,4 --rounds 3 --trace-seconds 0
  thaw bench fresh --concurrency 1,4 --rounds 3 --trace-seconds 20`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if report {
				return a.rerenderFresh(out)
			}
			if inputsFrom == "inline" && len(functions) == 0 {
				functions = []string{"hello"}
			}
			cases, stop, err := a.benchCases(inputsFrom, root, functions, true)
			if err != nil {
				return err
			}
			defer stop()
			return a.benchFresh(out, fresh.Config{Cases: cases, Concurrency: concurrency, Rounds: rounds, Trace: trace})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&root, "root", ".", "repository root (where functions/ is)")
	fl.StringVar(&out, "out", "", "directory for the result files")
	fl.StringVar(&inputsFrom, "inputs", "inline", "inline (hello, matmul, image) or redis (Table 2's 12 functions, inputs from a private Redis)")
	fl.StringSliceVar(&functions, "functions", nil, "only these functions (default: hello inline; every function of --inputs redis)")
	fl.IntSliceVar(&concurrency, "concurrency", []int{1, 4, 16}, "concurrent requests per burst")
	fl.IntVar(&rounds, "rounds", 5, "bursts per mode and concurrency")
	fl.Float64Var(&trace.Seconds, "trace-seconds", trace.Seconds, "the trace's length (0: no trace)")
	fl.Float64Var(&trace.Rate, "trace-rate", trace.Rate, "the trace's Poisson arrivals a second")
	fl.IntVar(&trace.BurstSize, "trace-burst", trace.BurstSize, "requests at once in each of the trace's bursts")
	fl.Float64Var(&trace.BurstEvery, "trace-burst-every", trace.BurstEvery, "seconds between the trace's bursts")
	fl.Uint64Var(&trace.Seed, "seed", trace.Seed, "the trace's seed")
	fl.BoolVar(&report, "report", false, "only write the report and plots again from DIR/fresh.json (--out)")
	return cmd
}

// benchFresh runs the measurement, its samples written as they come to
// out/fresh.partial.jsonl, and writes its results to out.
func (a *app) benchFresh(out string, cfg fresh.Config) error {
	cfg.Say = func(format string, x ...any) {
		fmt.Fprintf(a.Stderr, "%s [bench fresh] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, x...))
	}
	var sink *os.File
	if out != "" {
		f, err := createInDir(out, "fresh.partial.jsonl")
		if err != nil {
			return err
		}
		defer f.Close()
		sink, cfg.Sink = f, f
	}
	res, err := fresh.Run(a.Ctx, a.C, cfg)
	if err != nil {
		return err
	}
	if sink != nil {
		_ = os.Remove(sink.Name())
	}
	return printResults(a.App, out, "fresh", res.Samples, res, res.Markdown(), res.Figures())
}

// rerenderFresh writes the report and plots again from out/fresh.json.
func (a *app) rerenderFresh(out string) error {
	if out == "" {
		return cli.Usagef("--report needs --out DIR")
	}
	b, err := os.ReadFile(filepath.Join(out, "fresh.json"))
	if err != nil {
		return err
	}
	var res fresh.Result
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("fresh.json: %w", err)
	}
	res.Resummarize()
	return printResults(a.App, out, "fresh", res.Samples, &res, res.Markdown(), res.Figures())
}
