package prepare

import (
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newPrepareCmd() *cobra.Command {
	var (
		ev                             cli.EventFlags
		groupSize, mergeGap, timeoutMS int
		detach, variants               bool
	)
	cmd := &cobra.Command{
		Use:   "prepare FUNCTION",
		Short: "Record a function's working set and build every strategy's artifacts",
		Long: `Prepare a function for fast cold starts (FaaSnap's flow, section 4.8):
boot its VM and take a clean snapshot; restore it while recording the pages
the guest uses (mincore, working-set groups) during one invocation with the
record input; take the warm snapshot; build FaaSnap's loading-set file and
region table; then record REAP's working set (userfaultfd) on the warm
snapshot with the same input, and capture SnapBPF's working set (an eBPF
program on the page-cache tracepoint) during one more. Later 'thaw invoke FUNCTION --strategy S'
restores the warm snapshot with any strategy.

Preparing takes a while; it runs as an operation in thawd and its steps are
shown on stderr. --detach (or Ctrl-C) leaves it running (see 'thaw operation').`,
		Example: `  thaw prepare hello --event '{"name":"record"}'
  thaw invoke hello --strategy faasnap --evict-cache
  OP=$(thaw prepare hello --detach) && thaw operation wait "$OP"`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if groupSize < 0 || mergeGap < 0 || timeoutMS < 0 {
				return cli.Usagef("--group-size, --merge-gap and --timeout-ms must not be negative")
			}
			if cmd.Flags().Changed("event") && cmd.Flags().Changed("event-file") {
				return cli.Usagef("give --event or --event-file, not both")
			}
			event, err := ev.Read(a.App, cmd)
			if err != nil {
				return err
			}
			return a.RunOperation(detach, func() (*client.Operation, error) {
				return a.C.StartPrepare(a.Ctx, args[0], event, client.PrepareOptions{GroupSize: groupSize,
					MergeGap: mergeGap, Timeout: time.Duration(timeoutMS) * time.Millisecond, FaaSnapVariants: variants})
			})
		},
	}
	cli.AddDetach(cmd, &detach)
	fl := cmd.Flags()
	ev.Add(cmd, "the record input")
	fl.IntVar(&groupSize, "group-size", 0, "FaaSnap working-set group size in pages (default 1024)")
	fl.IntVar(&mergeGap, "merge-gap", 0, "FaaSnap region merge threshold in pages (default 32)")
	fl.IntVar(&timeoutMS, "timeout-ms", 0, "timeout of each record invocation in milliseconds")
	fl.BoolVar(&variants, "faasnap-variants", false, "also build FaaSnap's technique-off artifacts (invoke --variant no-hostrec, no-freed, no-merge)")
	return cmd
}
