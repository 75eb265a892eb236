package bench

import (
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/internal/bench"
)

const restoreLong = `Measures thaw's restore path with the VMM pool missing and hitting. For
every strategy and every concurrency N: N concurrent cold invocations of a
copy of the function that has no VMM pool (miss: every restore starts its
VMM), and of a copy whose pool holds N (hit: the burst starts once N standby
VMs are listed in GET /v1/vms; an answer that does not say vmm "pooled" is
recorded as not pooled). Each copy is prepared once and keeps no VM after a
cold invocation. Reports set-up, resume and total time, and host CPU per
cold start: the QEMU process's (process.cpu_total_ms, less a pooled VMM's
standby_cpu_ms, reported apart) and thawd's over the burst divided by its
cold starts, read from /proc/PID/stat of --daemon-pid (default $THAWD_PID;
unmeasured when unknown). A hit needs room for N standby VMs in the pool's
memory budget (thawd --vmm-pool-memory). With --out writes restore.jsonl,
restore.json, restore.md and the figures restore-setup.svg and
restore-cpu.svg.`

func (a *app) newBenchRestoreCmd() *cobra.Command {
	cfg := bench.DefaultRestoreConfig(".")
	var out string
	cmd := &cobra.Command{
		Use:   "restore",
		Short: "Cold-start set-up and host CPU with the VMM pool missing and hitting, 1 to 16 at once",
		Long:  restoreLong,
		Example: `  thaw --timeout 2h bench restore --out docs/results/restore
  thaw bench restore --reps 3 --concurrency 1,4,16 --strategies vanilla,faasnap --daemon-pid "$(pidof thawd)"`,
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("daemon-pid") {
				if v := os.Getenv("THAWD_PID"); v != "" {
					pid, err := strconv.Atoi(v)
					if err != nil || pid <= 0 {
						return cli.Usagef("THAWD_PID %q is not a process id", v)
					}
					cfg.DaemonPID = pid
				}
			}
			if _, err := a.checkStrategies(cfg.Check); err != nil {
				return err
			}
			if out != "" {
				sink, err := createInDir(out, "restore.jsonl")
				if err != nil {
					return err
				}
				defer sink.Close()
				cfg.Sink = sink
			}
			res, runErr := bench.RunRestore(a.Ctx, a.C, cfg, a.Stderr)
			if res == nil {
				return runErr
			}
			return a.finishRun(res, runErr, out, func(dir string) ([]string, error) { return bench.WriteRestore(dir, res) }, res.Markdown)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.Root, "root", ".", "repository root (where functions/ is)")
	fl.StringVar(&cfg.Function, "function", cfg.Function, "bundled function to restore (functions/NAME)")
	fl.IntVar(&cfg.MemoryMiB, "memory", cfg.MemoryMiB, "guest memory in MiB")
	fl.StringSliceVar(&cfg.Strategies, "strategies", cfg.Strategies, "restore strategies")
	fl.IntSliceVar(&cfg.Concurrency, "concurrency", cfg.Concurrency, "concurrent cold starts per burst (each 1 to 16)")
	fl.IntVar(&cfg.Reps, "reps", cfg.Reps, "bursts per strategy, pool mode and concurrency")
	fl.IntVar(&cfg.DaemonPID, "daemon-pid", 0, "thawd's process id, for its CPU time (default $THAWD_PID; none: unmeasured)")
	fl.DurationVar(&cfg.PoolWait, "pool-wait", cfg.PoolWait, "longest wait for the pool to hold N standby VMs")
	fl.DurationVar(&cfg.Timeout, "invoke-timeout", cfg.Timeout, "one invocation's timeout")
	fl.StringVar(&out, "out", "", "directory for restore.jsonl, restore.json, restore.md and the SVG figures")
	return cmd
}

// reportRestore recomputes a restore run's summaries, table and figures.
func (a *app) reportRestore(dir, out string) error {
	res, err := bench.ReadRestore(dir)
	if err != nil {
		return err
	}
	return a.finishRun(res, nil, out, func(dir string) ([]string, error) { return bench.WriteRestore(dir, res) }, res.Markdown)
}
