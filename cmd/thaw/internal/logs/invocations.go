package logs

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newInvocationsCmd() *cobra.Command {
	var (
		function string
		limit    int
	)
	cmd := &cobra.Command{
		Use:     "invocations",
		Aliases: []string{"invs"},
		Short:   "List recent invocations, newest first",
		Long: `List recent invocations, newest first: every invocation that reached a
guest, those that timed out or whose VM failed included (OK no, ERROR
Timeout or VMFailed). -o wide adds the VM, the snapshot, the version and
why a strategy fell back to vanilla.`,
		Example: `  thaw invocations
  thaw invocations --function hello --limit 10
  thaw -o json invocations --limit 1 | jq '.items[0].detail.timing'`,
		Args: cli.ExactArgs(),
		RunE: func(*cobra.Command, []string) error {
			if limit < 0 {
				return cli.Usagef("--limit must be positive, got %d", limit)
			}
			recs, err := a.C.ListInvocations(a.Ctx, function, limit)
			if err != nil {
				return err
			}
			head := []string{"ID", "FUNCTION", "OK", "MODE", "TOTAL", "STRATEGY", "CREATED", "ERROR"}
			if a.Wide {
				head = []string{"ID", "FUNCTION", "OK", "MODE", "TOTAL", "STRATEGY", "CREATED", "VM", "SNAPSHOT", "VERSION", "ERROR", "FALLBACK"}
			}
			return cli.PrintTable(a.App, recs, head, a.invocationCells)
		},
	}
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the invocations of this function")
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "at most this many (default: the daemon's, 100)")
	return cmd
}

// invocationCells are an invocation's row: the short columns first, the
// error last (in -o wide the VM, snapshot and version before it and the
// fallback after it).
func (a *app) invocationCells(r *client.InvocationRecord) []string {
	ok, errText := "yes", "-"
	if !r.OK {
		ok, errText = "no", "error"
		if e := r.Detail.Error; e != nil && e.Type != "" {
			errText = e.Type
			if a.Wide && e.Message != "" {
				errText += ": " + output.Truncate(e.Message, 60)
			}
		}
	}
	strategy := output.OrDash(r.Strategy)
	fallback := "-"
	if st := r.Detail.StrategyStats; st != nil && st.Fallback != "" {
		strategy += " (fell back)"
		fallback = output.Truncate(st.Fallback, 120)
	}
	cells := []string{r.ID, r.Function, ok, output.OrDash(r.Detail.Mode), output.FmtMS(r.Detail.Timing.TotalMS), strategy, output.FmtAge(r.CreatedAt)}
	if !a.Wide {
		return append(cells, output.Truncate(errText, 30))
	}
	version := "-"
	if r.Detail.Version > 0 {
		version = fmt.Sprint(r.Detail.Version)
	}
	return append(cells, output.OrDash(r.VM), output.OrDash(r.Snapshot), version, errText, fallback)
}
