package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

// runE is a command's RunE.
type runE = func(cmd *cobra.Command, args []string) error

// The client is opened when a command runs (wrapRunE), after the commands
// are built: helpers take client methods as method expressions, such as
// (*client.Client).GetVM, and call them on a.c then.

// newListCmd is the "list" (ls) command of a kind of object (what, plural).
func newListCmd(what string, run runE) *cobra.Command {
	return &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List " + what, Args: exactArgs(), RunE: run}
}

// newGetCmd is the "get ARG" (show) command of a kind of object.
func newGetCmd(what, arg string, run runE) *cobra.Command {
	return &cobra.Command{Use: "get " + arg, Aliases: []string{"show"}, Short: "Show one " + what, Args: exactArgs(arg), RunE: run}
}

// oneRunE returns a RunE that calls do with the command's argument and
// prints the object it returns with print.
func oneRunE[T any](a *app, do func(*client.Client, context.Context, string) (*T, error), print func(*T) error) runE {
	return func(_ *cobra.Command, args []string) error {
		v, err := do(a.c, a.ctx, args[0])
		if err != nil {
			return err
		}
		return print(v)
	}
}

// listRunE returns a RunE that lists objects with list and prints them
// (printTable).
func listRunE[T any](a *app, list func(*client.Client, context.Context) ([]T, error), head []string, cells func(*T) []string) runE {
	return func(*cobra.Command, []string) error {
		items, err := list(a.c, a.ctx)
		if err != nil {
			return err
		}
		return printTable(a, items, head, cells)
	}
}

// printTable prints items as {"items": [...]} with -o json or yaml, their
// ids (each one's first cell) with -q, else as a table: head, then the
// cells of each item.
func printTable[T any](a *app, items []T, head []string, cells func(*T) []string) error {
	switch {
	case a.json:
		return printList(a, items)
	case a.quiet:
		for i := range items {
			a.quietID(cells(&items[i])[0])
		}
		return nil
	}
	w := newTable(a.stdout)
	row(w, head...)
	for i := range items {
		row(w, cells(&items[i])...)
	}
	return w.Flush()
}

// deleteAll deletes every id with del, reporting each failure on stderr and
// going on; it fails (exit code 1) if any delete failed.
func (a *app) deleteAll(kind string, ids []string, del func(ctx context.Context, id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := del(a.ctx, id); err != nil {
			if a.ctx.Err() != nil || len(ids) == 1 {
				return err
			}
			a.printError(err)
			failed++
			continue
		}
		if !a.json && !a.quiet {
			fmt.Fprintf(a.stdout, "deleted %s %s\n", kind, id)
		}
	}
	if failed > 0 {
		a.report("error", fmt.Sprintf("%d of %d %ss not deleted", failed, len(ids), kind), "", "")
		return &exitCodeError{code: exitError}
	}
	return nil
}
