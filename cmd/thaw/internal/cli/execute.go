package cli

import (
	"context"
	"errors"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
)

// Execute runs root, the command tree of a, with args and returns thaw's
// exit code, having reported any error on a.Stderr as a.Report does.
func (a *App) Execute(ctx context.Context, root *cobra.Command, args []string) int {
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	defer func() {
		if a.Cancel != nil {
			a.Cancel()
		}
	}()
	if err == nil {
		return ExitOK
	}
	_ = a.ResolveOutput() // errors are reported in the format asked for, whatever else is wrong
	if sig, ok := interruptedBy(ctx); ok {
		var ee *ExitCodeError
		if !errors.As(err, &ee) { // not reported yet
			a.Report("interrupted", "interrupted; the operation may still finish on the daemon", "", "")
		}
		return ExitSignal + sig
	}
	var ee *ExitCodeError
	if errors.As(err, &ee) {
		return ee.Code // already reported
	}
	var ue *UsageError
	if errors.As(err, &ue) || !a.InRun {
		// Errors cobra finds before a command runs (unknown commands and
		// flags, wrong number of arguments, ...) are usage errors too.
		a.Report("usage", err.Error(), "", UsageLine(cmd))
		return ExitUsage
	}
	var ae *client.APIError
	if errors.As(err, &ae) && errors.Is(err, client.ErrInvalid) {
		// The daemon refused the request as malformed (400): a bad value given.
		a.Report(ae.Code, err.Error(), ae.RequestID, UsageLine(cmd))
		return ExitUsage
	}
	a.PrintError(err)
	return ExitError
}
