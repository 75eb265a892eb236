package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// addDetach adds --detach to a command that starts an operation.
func addDetach(cmd *cobra.Command, detach *bool) {
	cmd.Flags().BoolVarP(detach, "detach", "d", false, "start the operation, print its id and return (follow it with 'thaw operation wait ID')")
}

// operationCmd completes cmd, which takes one argument, as a command that
// starts an operation with start and follows it (runOperation; --detach).
func (a *app) operationCmd(cmd *cobra.Command, start func(*client.Client, context.Context, string) (*client.Operation, error)) *cobra.Command {
	var detach bool
	cmd.RunE = func(_ *cobra.Command, args []string) error {
		return a.runOperation(detach, func() (*client.Operation, error) { return start(a.c, a.ctx, args[0]) })
	}
	addDetach(cmd, &detach)
	return cmd
}

// runOperation starts an operation and, unless detach, follows it to its
// end and prints its result as the command that started it prints it.
// Detached, it prints the operation's id (with --json, the operation).
func (a *app) runOperation(detach bool, start func() (*client.Operation, error)) error {
	op, err := start()
	if err != nil {
		return err
	}
	if detach {
		if a.json {
			return a.printJSON(op)
		}
		fmt.Fprintln(a.stdout, op.ID)
		return nil
	}
	if op, err = a.follow(op.ID); err != nil || op == nil {
		return err
	}
	return a.printResult(op)
}

// follow polls an operation until it ends, showing progress on stderr. If
// following stops first (Ctrl-C, --timeout) it says how to go on
// following; the operation continues in the daemon.
func (a *app) follow(id string) (*client.Operation, error) {
	p := newProgressLine(a.stderr)
	p.quiet = a.quiet
	op, err := a.c.WaitOperation(a.ctx, id, p.show)
	p.end()
	if err != nil && a.ctx.Err() != nil {
		why := "interrupted"
		if errors.Is(a.ctx.Err(), context.DeadlineExceeded) {
			why = fmt.Sprintf("no end within %s (raise --timeout)", a.timeout)
		}
		code := "interrupted"
		if errors.Is(a.ctx.Err(), context.DeadlineExceeded) {
			code = "deadline"
		}
		a.report(code, fmt.Sprintf("%s; operation %s goes on in thawd: follow it with 'thaw operation wait %s', stop it with 'thaw operation cancel %s'",
			why, id, id, id), "", "")
		return nil, &exitCodeError{code: exitError}
	}
	return op, err
}

// printResult prints a finished operation's result as the command that
// started it prints it.
func (a *app) printResult(op *client.Operation) error {
	r := op.Result
	switch {
	case r == nil:
		return a.printOperation(op)
	case r.VM != nil:
		return a.printVM(r.VM)
	case r.Prepare != nil:
		switch {
		case a.json:
			return a.printJSON(r.Prepare)
		case a.quiet:
			if r.Prepare.Warm != nil {
				a.quietID(r.Prepare.Warm.ID)
			}
			return nil
		}
		return a.printPrepare(r.Prepare)
	case r.Store != nil:
		return a.printStored(r.Store)
	case r.Snapshot != nil:
		return a.snapshotPrinter("copied " + op.Target + " to")(r.Snapshot)
	case r.Push != nil:
		return a.printPush(r.Push)
	case r.Pull != nil:
		return a.printPull(r.Pull)
	case r.GC != nil:
		return a.printGC(r.GC)
	case r.Deploy != nil:
		return a.printDeploy(r.Deploy)
	case r.Refresh != nil:
		return a.printRefresh(r.Refresh)
	}
	return a.printOperation(op)
}

func (a *app) printOperation(op *client.Operation) error {
	return a.printObject(op, "", "", func(w io.Writer) {
		row(w, "ID:", op.ID)
		row(w, "Kind:", op.Kind)
		row(w, "Target:", op.Target)
		row(w, "State:", op.State)
		row(w, "Progress:", progressText(op))
		if e := op.Error; e != nil {
			row(w, "Error:", fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Message))
		}
		row(w, "Created:", fmtAge(op.CreatedAt))
		row(w, "Updated:", fmtAge(op.UpdatedAt))
	})
}

// progressText is an operation's phase with its counts.
func progressText(op *client.Operation) string {
	p := op.Progress
	switch {
	case p.Total > 0 && p.Unit == "bytes":
		return fmt.Sprintf("%s (%s of %s)", p.Phase, fmtBytes(p.Done), fmtBytes(p.Total))
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
	text := fmt.Sprintf("%s %s %s: %s", op.ID, op.Kind, op.Target, progressText(op))
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
