package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *App) newDLQCmd() *cobra.Command {
	cmd := NewGroupCmd("dlq", "Dead letters: asynchronous invocations that failed or expired",
		`The dead-letter subject keeps the outcomes of asynchronous invocations
that failed every attempt or expired (and any outcome a function's
settings send there): read them, run them again, or purge them.`, "dead-letters")
	var function string
	var limit int
	list := NewListCmd("dead letters", func(*cobra.Command, []string) error {
		dls, err := a.C.ListDeadLetters(a.Ctx, function, limit)
		if err != nil {
			return err
		}
		return PrintTable(a, dls, []string{"ID", "FUNCTION", "CONDITION", "ATTEMPTS", "ERROR", "STORED"}, func(d *client.DeadLetter) []string {
			return []string{d.Outcome.ID, d.Outcome.Function, d.Outcome.Condition, strconv.Itoa(d.Outcome.Attempts), OrDash(outcomeError(&d.Outcome)), FmtAge(d.Stored)}
		})
	})
	list.Flags().StringVar(&function, "function", "", "only this function's")
	list.Flags().IntVar(&limit, "limit", 1000, "at most this many (0: all)")
	show := NewGetCmd("dead letter", "ID", OneRunE(a, (*client.Client).GetDeadLetter, a.printDeadLetter))
	show.Use, show.Aliases = "show ID", []string{"get"}
	replay := &cobra.Command{Use: "replay ID", Short: "Queue a dead letter's event again (attempts start over) and remove it",
		Args: ExactArgs("ID"), RunE: OneRunE(a, (*client.Client).ReplayDeadLetter, a.PrintAccepted)}
	var all bool
	purge := &cobra.Command{Use: "purge (--function NAME | --all)", Short: "Remove dead letters", Args: ExactArgs(),
		RunE: func(*cobra.Command, []string) error {
			if (function == "") == !all {
				return Usagef("give --function NAME, or --all for every function's")
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

func (a *App) printDeadLetter(d *client.DeadLetter) error {
	return a.PrintObject(d, "dead letter", termtext.Line(d.Outcome.ID), func(w io.Writer) {
		o := d.Outcome
		Row(w, "function", o.Function)
		Row(w, "condition", o.Condition)
		Row(w, "attempts", strconv.Itoa(o.Attempts))
		if e := outcomeError(&o); e != "" {
			Row(w, "error", e)
		}
		if o.Invocation != nil {
			Row(w, "invocation", o.Invocation.ID)
		}
		Row(w, "event", string(o.Event))
		Row(w, "queued", FmtTime(o.EnqueuedAt))
		Row(w, "finished", FmtTime(o.FinishedAt))
		Row(w, "stored", fmt.Sprintf("%s (seq %d)", FmtTime(d.Stored), d.Seq))
	})
}
