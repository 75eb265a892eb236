package bench

import (
	"slices"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
)

func (a *app) newBenchMemoryCmd() *cobra.Command {
	var (
		root       string
		functions  []string
		strategies []string
		clones     []int
		out        string
		inputsFrom string
	)
	cmd := &cobra.Command{
		Use:   "memory",
		Short: "Host memory per clone: N VMs restored from one snapshot, per strategy",
		Long: `Prepares each function, then for every strategy and every clone count N
restores N VMs from the function's warm snapshot (page cache evicted first),
invokes each once, and measures with all of them alive: the private
anonymous memory of every QEMU process, plus the page-cache pages of the
snapshot's files and its memory-store copy counted once. premap's snapshot
is placed in the memory store for its runs. With --out writes
DIR/memory.jsonl, DIR/memory.json and DIR/memory.md.`,
		Example: `  thaw bench memory --functions hello --out docs/results/memory
  thaw bench memory --functions hello --strategies vanilla,reap --clones 1,4`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(clones) == 0 || slices.ContainsFunc(clones, func(n int) bool { return n < 1 || n > 64 }) {
				return cli.Usagef("--clones must be numbers from 1 to 64")
			}
			cases, stop, err := a.benchCases(inputsFrom, root, functions, false)
			if err != nil {
				return err
			}
			defer stop()
			if len(strategies) == 0 {
				info, err := a.C.Info(a.Ctx)
				if err != nil {
					return err
				}
				strategies = info.Strategies
			}
			res, err := bench.RunMemory(a.Ctx, a.C, cases, nil, strategies, clones, a.Stderr)
			if err != nil {
				return err
			}
			return printResults(a.App, out, "memory", res.Samples, res, res.Markdown(), res.Figures())
		},
	}
	cmd.Flags().StringVar(&root, "root", ".", "repository root (where functions/ is)")
	cmd.Flags().StringSliceVar(&functions, "functions", []string{"hello"}, "functions to measure")
	cmd.Flags().StringSliceVar(&strategies, "strategies", nil, "strategies to compare (default: all the daemon has)")
	cmd.Flags().IntSliceVar(&clones, "clones", bench.DefaultClones, "numbers of clones kept alive at once")
	cmd.Flags().StringVar(&out, "out", "", "directory for the result files")
	cmd.Flags().StringVar(&inputsFrom, "inputs", "inline", "inline (hello, matmul, image with generated inputs) or redis (Table 2 inputs)")
	return cmd
}
