package cli

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// RunFunc is a command's RunE.
type RunFunc = func(cmd *cobra.Command, args []string) error

// The client is opened when a command runs (WrapRunE), after the commands
// are built: helpers take client methods as method expressions, such as
// (*client.Client).GetVM, and call them on a.c then.

// NewListCmd is the "list" (ls) command of a kind of object (what, plural).
func NewListCmd(what string, run RunFunc) *cobra.Command {
	return &cobra.Command{Use: "list", Aliases: []string{"ls"}, Short: "List " + what, Args: ExactArgs(), RunE: run}
}

// NewGetCmd is the "get ARG" (show) command of a kind of object.
func NewGetCmd(what, arg string, run RunFunc) *cobra.Command {
	return &cobra.Command{Use: "get " + arg, Aliases: []string{"show"}, Short: "Show one " + what, Args: ExactArgs(arg), RunE: run}
}

// OneRunE returns a RunE that calls do with the command's argument and
// prints the object it returns with print.
func OneRunE[T any](a *App, do func(*client.Client, context.Context, string) (*T, error), print func(*T) error) RunFunc {
	return func(_ *cobra.Command, args []string) error {
		v, err := do(a.C, a.Ctx, args[0])
		if err != nil {
			return err
		}
		return print(v)
	}
}

// ListRunE returns a RunE that lists objects with list and prints them
// (PrintTable).
func ListRunE[T any](a *App, list func(*client.Client, context.Context) ([]T, error), head []string, cells func(*T) []string) RunFunc {
	return func(*cobra.Command, []string) error {
		items, err := list(a.C, a.Ctx)
		if err != nil {
			return err
		}
		return PrintTable(a, items, head, cells)
	}
}

// PrintTable prints items as {"items": [...]} with -o json or yaml, their
// ids (each one's first cell) with -q, else as a table: head, then the
// cells of each item.
func PrintTable[T any](a *App, items []T, head []string, cells func(*T) []string) error {
	switch {
	case a.JSON:
		return PrintList(a, items)
	case a.Quiet:
		for i := range items {
			a.QuietID(cells(&items[i])[0])
		}
		return nil
	}
	w := output.NewTable(a.Stdout)
	output.Row(w, head...)
	for i := range items {
		output.Row(w, cells(&items[i])...)
	}
	return w.Flush()
}

// DeleteAll deletes every id with del, reporting each failure on stderr and
// going on; it fails (exit code 1) if any delete failed.
func (a *App) DeleteAll(kind string, ids []string, del func(ctx context.Context, id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := del(a.Ctx, id); err != nil {
			if a.Ctx.Err() != nil || len(ids) == 1 {
				return err
			}
			a.PrintError(err)
			failed++
			continue
		}
		if !a.JSON && !a.Quiet {
			fmt.Fprintf(a.Stdout, "deleted %s %s\n", kind, id)
		}
	}
	if failed > 0 {
		a.Report("error", fmt.Sprintf("%d of %d %ss not deleted", failed, len(ids), kind), "", "")
		return &ExitCodeError{Code: ExitError}
	}
	return nil
}
