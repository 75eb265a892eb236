package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
	"github.com/thaw-dev/thaw/internal/bench/eval"
)

// driftCases are the drift experiment's functions: input A, then an input
// of another size (B) that makes the working set recorded with A miss pages.
func driftCases(root string) map[string]bench.FunctionCase {
	fc := func(name string, mem int, a, b string) bench.FunctionCase {
		return bench.FunctionCase{Name: name, Dir: filepath.Join(root, "functions", name), MemoryMiB: mem,
			RecordEvent: json.RawMessage(a), TestEvent: json.RawMessage(b)}
	}
	return map[string]bench.FunctionCase{
		"image":  fc("image", 384, `{"size":128,"seed":1}`, `{"size":640,"seed":2}`),
		"json":   fc("json", 384, `{"records":300,"seed":1}`, `{"records":3000,"seed":2}`),
		"matmul": fc("matmul", 384, `{"n":64,"seed":1}`, `{"n":256,"seed":2}`),
	}
}

func (a *app) newBenchAdaptiveCmd() *cobra.Command {
	var (
		root, out, function, inputsFrom string
		arms, functions                 []string
		coldStarts, rounds              int
		seed                            uint64
		mixed, report                   bool
	)
	cmd := &cobra.Command{
		Use:   "adaptive",
		Short: "The adaptive restore against every fixed strategy: an input that drifts, and a mixed local and remote workload",
		Long: `Runs the same sequence of cold starts under the adaptive restore (strategy
auto, working sets refreshed from traffic) and under each fixed strategy,
each arm on its own copy of the function, the arms taking turns at every
step, every cold start from storage (its snapshot's files evicted from the
page cache first).

drift (the default): the function is prepared with input A; the first half
of --cold-starts run A, the second half B, which the working sets recorded
with A serve badly. The arm reap+refresh is reap with its working set
refreshed from traffic. Reports each arm's total per phase, the bytes
fetched, when a refresh came and the share of touched pages outside the
recorded set before and after it.

--mixed: every function of --functions both local and remote (pushed to
the registry, its local snapshots deleted, imported lazily on its first
invocation), --rounds rounds of a shuffled mix. The daemon needs a registry
(thawd --registry-config); a small --chunk-cache-budget makes every remote
restore fetch its memory from the registry.

Writes DIR/adaptive-EXPERIMENT.jsonl (samples), .json, .md and SVG plots.`,
		Example: `  thaw bench adaptive --function image --cold-starts 40 --out docs/results/adaptive
  thaw bench adaptive --mixed --inputs redis --rounds 3 --out docs/results/adaptive`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if report {
				return a.rerenderAdaptive(out, mixed)
			}
			if mixed {
				return a.benchAdaptive(out, "adaptive-mixed", func(sink *os.File, say func(string, ...any)) (*eval.AdaptiveResult, error) {
					return a.runMixed(root, inputsFrom, functions, arms, rounds, seed, sink, say)
				})
			}
			fc, ok := driftCases(root)[function]
			if !ok {
				return cli.Usagef("--function %q: one of image, json, matmul", function)
			}
			if len(arms) == 0 {
				arms = eval.DefaultDriftArms
			}
			return a.benchAdaptive(out, "adaptive-drift", func(sink *os.File, say func(string, ...any)) (*eval.AdaptiveResult, error) {
				cfg := eval.DriftConfig{Case: fc, Arms: arms, ColdStarts: coldStarts, Say: say}
				if sink != nil {
					cfg.Sink = sink
				}
				return eval.RunDrift(a.Ctx, a.C, cfg)
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&root, "root", ".", "repository root (where functions/ is)")
	fl.StringVar(&out, "out", "", "directory for the result files")
	fl.StringVar(&function, "function", "image", "drift: the function (image, json or matmul)")
	fl.IntVar(&coldStarts, "cold-starts", 40, "drift: cold starts per arm (half with each input)")
	fl.StringSliceVar(&arms, "arms", nil, "arms: auto, strategies, STRATEGY+refresh (default: drift auto,vanilla,reap,reap+refresh,faasnap,snapbpf; mixed auto,vanilla,reap,faasnap)")
	fl.BoolVar(&mixed, "mixed", false, "run the mixed local and remote experiment instead")
	fl.StringSliceVar(&functions, "functions", nil, "mixed: only these functions (default: all of --inputs)")
	fl.StringVar(&inputsFrom, "inputs", "redis", "mixed: inline (hello, matmul, image) or redis (Table 2's 12 functions, inputs A/B from a private Redis)")
	fl.IntVar(&rounds, "rounds", 3, "mixed: rounds of the shuffled mix")
	fl.Uint64Var(&seed, "seed", 1, "mixed: the shuffle's seed")
	fl.BoolVar(&report, "report", false, "only write the report and plots again from DIR/adaptive-EXPERIMENT.json (--out)")
	return cmd
}

// benchAdaptive runs one adaptive experiment, its samples written as they
// come to out/NAME.partial.jsonl, and writes its results to out.
func (a *app) benchAdaptive(out, name string, run func(*os.File, func(string, ...any)) (*eval.AdaptiveResult, error)) error {
	say := func(format string, x ...any) {
		fmt.Fprintf(a.Stderr, "%s [bench adaptive] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, x...))
	}
	var sink *os.File
	if out != "" {
		f, err := createInDir(out, name+".partial.jsonl")
		if err != nil {
			return err
		}
		defer f.Close()
		sink = f
	}
	res, err := run(sink, say)
	if err != nil {
		return err
	}
	if sink != nil {
		_ = os.Remove(sink.Name())
	}
	return printResults(a.App, out, name, res.Samples, res, res.Markdown(), res.Figures())
}

// benchCommand is the command that writes the results named name.
func benchCommand(name string) string {
	switch name {
	case "adaptive-drift":
		return "adaptive"
	case "adaptive-mixed":
		return "adaptive --mixed"
	}
	return name
}

// rerenderAdaptive writes an experiment's report and plots again from its
// results in out.
func (a *app) rerenderAdaptive(out string, mixed bool) error {
	if out == "" {
		return cli.Usagef("--report needs --out DIR")
	}
	name := "adaptive-drift"
	if mixed {
		name = "adaptive-mixed"
	}
	b, err := os.ReadFile(filepath.Join(out, name+".json"))
	if err != nil {
		return err
	}
	var res eval.AdaptiveResult
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", name+".json", err)
	}
	res.Resummarize()
	return printResults(a.App, out, name, res.Samples, &res, res.Markdown(), res.Figures())
}

// runMixed runs the mixed experiment on the cases of --inputs.
func (a *app) runMixed(root, inputsFrom string, functions, arms []string, rounds int, seed uint64, sink *os.File, say func(string, ...any)) (*eval.AdaptiveResult, error) {
	cases, stop, err := a.benchCases(inputsFrom, root, functions, true)
	if err != nil {
		return nil, err
	}
	defer stop()
	if len(arms) == 0 {
		arms = eval.DefaultMixedArms
	}
	cfg := eval.MixedConfig{Cases: cases, Arms: arms, Rounds: rounds, Seed: seed, Say: say}
	if sink != nil {
		cfg.Sink = sink
	}
	return eval.RunMixed(a.Ctx, a.C, cfg)
}
