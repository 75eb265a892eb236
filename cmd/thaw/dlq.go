package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newDLQCmd() *cobra.Command {
	cmd := newGroupCmd("dlq", "Dead letters: asynchronous invocations that failed or expired",
		`The dead-letter subject keeps the outcomes of asynchronous invocations
that failed every attempt or expired (and any outcome a function's
settings send there): read them, run them again, or purge them.`, "dead-letters")
	var function string
	var limit int
	list := newListCmd("dead letters", func(*cobra.Command, []string) error {
		dls, err := a.c.ListDeadLetters(a.ctx, function, limit)
		if err != nil {
			return err
		}
		return printTable(a, dls, []string{"ID", "FUNCTION", "CONDITION", "ATTEMPTS", "ERROR", "STORED"}, func(d *client.DeadLetter) []string {
			return []string{d.Outcome.ID, d.Outcome.Function, d.Outcome.Condition, strconv.Itoa(d.Outcome.Attempts), orDash(outcomeError(&d.Outcome)), fmtAge(d.Stored)}
		})
	})
	list.Flags().StringVar(&function, "function", "", "only this function's")
	list.Flags().IntVar(&limit, "limit", 1000, "at most this many (0: all)")
	show := newGetCmd("dead letter", "ID", oneRunE(a, (*client.Client).GetDeadLetter, a.printDeadLetter))
	show.Use, show.Aliases = "show ID", []string{"get"}
	replay := &cobra.Command{Use: "replay ID", Short: "Queue a dead letter's event again (attempts start over) and remove it",
		Args: exactArgs("ID"), RunE: oneRunE(a, (*client.Client).ReplayDeadLetter, a.printAccepted)}
	var all bool
	purge := &cobra.Command{Use: "purge (--function NAME | --all)", Short: "Remove dead letters", Args: exactArgs(),
		RunE: func(*cobra.Command, []string) error {
			if (function == "") == !all {
				return usagef("give --function NAME, or --all for every function's")
			}
			r, err := a.c.PurgeDeadLetters(a.ctx, function)
			if err != nil {
				return err
			}
			return a.printOr(r, "purged %d dead letters\n", r.Purged)
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
	return a.printObject(d, "dead letter", termtext.Line(d.Outcome.ID), func(w io.Writer) {
		o := d.Outcome
		row(w, "function", o.Function)
		row(w, "condition", o.Condition)
		row(w, "attempts", strconv.Itoa(o.Attempts))
		if e := outcomeError(&o); e != "" {
			row(w, "error", e)
		}
		if o.Invocation != nil {
			row(w, "invocation", o.Invocation.ID)
		}
		row(w, "event", string(o.Event))
		row(w, "queued", fmtTime(o.EnqueuedAt))
		row(w, "finished", fmtTime(o.FinishedAt))
		row(w, "stored", fmt.Sprintf("%s (seq %d)", fmtTime(d.Stored), d.Seq))
	})
}
