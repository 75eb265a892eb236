package async

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newDLQCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("dlq", "Dead letters: asynchronous invocations that failed or expired",
		`The dead-letter subject keeps the outcomes of asynchronous invocations
that failed every attempt or expired (and any outcome a function's
settings send there): read them, run them again, or purge them.`, "dead-letters")
	var function string
	var limit int
	list := cli.NewListCmd("dead letters", func(*cobra.Command, []string) error {
		dls, err := a.C.ListDeadLetters(a.Ctx, function, limit)
		if err != nil {
			return err
		}
		return cli.PrintTable(a.App, dls, []string{"ID", "FUNCTION", "CONDITION", "ATTEMPTS", "ERROR", "STORED"}, func(d *client.DeadLetter) []string {
			return []string{d.Outcome.ID, d.Outcome.Function, d.Outcome.Condition, strconv.Itoa(d.Outcome.Attempts), output.OrDash(outcomeError(&d.Outcome)), output.FmtAge(d.Stored)}
		})
	})
	list.Flags().StringVar(&function, "function", "", "only this function's")
	list.Flags().IntVar(&limit, "limit", 1000, "at most this many (0: all)")
	show := cli.NewGetCmd("dead letter", "ID", cli.OneRunE(a.App, (*client.Client).GetDeadLetter, a.printDeadLetter))
	show.Use, show.Aliases = "show ID", []string{"get"}
	replay := &cobra.Command{Use: "replay ID", Short: "Queue a dead letter's event again (attempts start over) and remove it",
		Args: cli.ExactArgs("ID"), RunE: cli.OneRunE(a.App, (*client.Client).ReplayDeadLetter, a.PrintAccepted)}
	var all bool
	purge := &cobra.Command{Use: "purge (--function NAME | --all)", Short: "Remove dead letters", Args: cli.ExactArgs(),
		RunE: func(*cobra.Command, []string) error {
			if (function == "") == !all {
				return cli.Usagef("give --function NAME, or --all for every function's")
			}
			r, err := a.C.PurgeDeadLetters(a.Ctx, function)
			if err != nil {
				return err
			}
			return a.PrintOr(r, "purged %d dead letters\n", r.Purged)
		}}
	purge.Flags().StringVar(&function, "function", "", "purge this function's")
	purge.Flags().BoolVar(&all, "all", false, "purge every function's")
	cmd.AddCommand(list, show, replay, purge)
	return cmd
}

// outcomeError is an outcome's error in a line: the platform's, else the
// handler's.
func outcomeError(o *client.Outcome) string {
	if o.Error != "" {
		return o.Error
	}
	if o.Invocation != nil && o.Invocation.Error != nil {
		return o.Invocation.Error.Type + ": " + o.Invocation.Error.Message
	}
	return ""
}

func (a *app) printDeadLetter(d *client.DeadLetter) error {
	return a.PrintObject(d, "dead letter", termtext.Line(d.Outcome.ID), func(w io.Writer) {
		o := d.Outcome
		output.Row(w, "function", o.Function)
		output.Row(w, "condition", o.Condition)
		output.Row(w, "attempts", strconv.Itoa(o.Attempts))
		if e := outcomeError(&o); e != "" {
			output.Row(w, "error", e)
		}
		if o.Invocation != nil {
			output.Row(w, "invocation", o.Invocation.ID)
		}
		output.Row(w, "event", string(o.Event))
		output.Row(w, "queued", output.FmtTime(o.EnqueuedAt))
		output.Row(w, "finished", output.FmtTime(o.FinishedAt))
		output.Row(w, "stored", fmt.Sprintf("%s (seq %d)", output.FmtTime(d.Stored), d.Seq))
	})
}
