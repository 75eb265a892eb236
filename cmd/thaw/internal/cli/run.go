package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// AddDetach adds --detach to a command that starts an operation.
func AddDetach(cmd *cobra.Command, detach *bool) {
	cmd.Flags().BoolVarP(detach, "detach", "d", false, "start the operation, print its id and return (follow it with 'thaw operation wait ID')")
}

// OperationCmd completes cmd, which takes one argument, as a command that
// starts an operation with start and follows it (RunOperation; --detach).
func (a *App) OperationCmd(cmd *cobra.Command, start func(*client.Client, context.Context, string) (*client.Operation, error)) *cobra.Command {
	var detach bool
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return a.RunOperation(detach, func() (*client.Operation, error) { return start(a.C, a.Ctx, args[0]) })
	}
	AddDetach(cmd, &detach)
	return cmd
}

// RunOperation starts an operation and, unless detach, follows it to its
// end and prints its result as the command that started it prints it.
// Detached, it prints the operation's id (with --json, the operation).
func (a *App) RunOperation(detach bool, start func() (*client.Operation, error)) error {
	op, err := start()
	if err != nil {
		return err
	}
	if detach {
		if a.JSON {
			return a.PrintJSON(op)
		}
		fmt.Fprintln(a.Stdout, op.ID)
		return nil
	}
	if op, err = a.Follow(op.ID); err != nil || op == nil {
		return err
	}
	return a.PrintResult(op)
}

// Follow polls an operation until it ends, showing progress on stderr. If
// following stops first (Ctrl-C, --timeout) it says how to go on
// following; the operation continues in the daemon.
func (a *App) Follow(id string) (*client.Operation, error) {
	p := newProgressLine(a.Stderr)
	p.quiet = a.Quiet
	op, err := a.C.WaitOperation(a.Ctx, id, p.show)
	p.end()
	if err != nil && a.Ctx.Err() != nil {
		why := "interrupted"
		if errors.Is(a.Ctx.Err(), context.DeadlineExceeded) {
			why = fmt.Sprintf("no end within %s (raise --timeout)", a.Timeout)
		}
		code := "interrupted"
		if errors.Is(a.Ctx.Err(), context.DeadlineExceeded) {
			code = "deadline"
		}
		a.Report(code, fmt.Sprintf("%s; operation %s goes on in thawd: follow it with 'thaw operation wait %s', stop it with 'thaw operation cancel %s'",
			why, id, id, id), "", "")
		return nil, &ExitCodeError{Code: ExitError}
	}
	return op, err
}

// PrintResult prints a finished operation's result as the command that
// started it prints it.
func (a *App) PrintResult(op *client.Operation) error {
	r := op.Result
	switch {
	case r == nil:
		return a.PrintOperation(op)
	case r.VM != nil:
		return a.PrintVM(r.VM)
	case r.Prepare != nil:
		switch {
		case a.JSON:
			return a.PrintJSON(r.Prepare)
		case a.Quiet:
			if r.Prepare.Warm != nil {
				a.QuietID(r.Prepare.Warm.ID)
			}
			return nil
		}
		return a.PrintPrepare(r.Prepare)
	case r.Store != nil:
		return a.PrintStored(r.Store)
	case r.Snapshot != nil:
		return a.SnapshotPrinter("copied " + op.Target + " to")(r.Snapshot)
	case r.Push != nil:
		return a.PrintPush(r.Push)
	case r.Pull != nil:
		return a.PrintPull(r.Pull)
	case r.GC != nil:
		return a.PrintGC(r.GC)
	case r.Deploy != nil:
		return a.PrintDeploy(r.Deploy)
	case r.Refresh != nil:
		return a.PrintRefresh(r.Refresh)
	}
	return a.PrintOperation(op)
}

// PrintOperation prints an operation: its kind, target, state and progress.
func (a *App) PrintOperation(op *client.Operation) error {
	return a.PrintObject(op, "", "", func(w io.Writer) {
		output.Row(w, "ID:", op.ID)
		output.Row(w, "Kind:", op.Kind)
		output.Row(w, "Target:", op.Target)
		output.Row(w, "State:", op.State)
		output.Row(w, "Progress:", ProgressText(op))
		if e := op.Error; e != nil {
			output.Row(w, "Error:", fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message))
		}
		output.Row(w, "Created:", output.FmtAge(op.CreatedAt))
		output.Row(w, "Updated:", output.FmtAge(op.UpdatedAt))
	})
}

// ProgressText is an operation's phase with its counts.
func ProgressText(op *client.Operation) string {
	p := op.Progress
	switch {
	case p.Total > 0 && p.Unit == "bytes":
		return fmt.Sprintf("%s (%s of %s)", p.Phase, output.FmtBytes(p.Done), output.FmtBytes(p.Total))
	case p.Total > 0:
		return fmt.Sprintf("%s (%d of %d %s)", p.Phase, p.Done, p.Total, p.Unit)
	}
	return p.Phase
}

// progressLine shows an operation's progress: on a terminal one line
// rewritten in place, elsewhere a line per phase.
type progressLine struct {
	w     io.Writer
	tty   bool
	quiet bool // -q: nothing
	phase string
	drawn bool
}

func newProgressLine(w io.Writer) *progressLine {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil {
			tty = fi.Mode()&os.ModeCharDevice != 0
		}
	}
	return &progressLine{w: w, tty: tty}
}

func (p *progressLine) show(op *client.Operation) {
	if p.quiet {
		return
	}
	text := fmt.Sprintf("%s %s %s: %s", op.ID, op.Kind, op.Target, ProgressText(op))
	if op.State != "running" {
		text = fmt.Sprintf("%s %s %s: %s", op.ID, op.Kind, op.Target, op.State)
	}
	text = termtext.Line(text)
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%s", text)
		p.drawn = true
		return
	}
	if key := op.State + "/" + op.Progress.Phase; key != p.phase {
		p.phase = key
		fmt.Fprintln(p.w, text)
	}
}

// end finishes the terminal's line.
func (p *progressLine) end() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
