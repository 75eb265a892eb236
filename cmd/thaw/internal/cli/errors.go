package cli

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
)

// Exit codes.
const (
	ExitOK       = 0   // success
	ExitError    = 1   // any error: daemon error, unreachable daemon, ...
	ExitUsage    = 2   // usage error: unknown command or flag, bad arguments or flag values (the daemon's 400 too), a missing input file
	ExitFunction = 3   // the function ran but raised an exception
	ExitSignal   = 128 // plus the signal's number: interrupted (SIGINT: 130, SIGTERM: 143)
)

// UsageLine says where cmd's usage is.
func UsageLine(cmd *cobra.Command) string {
	return fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())
}

// PrintError reports a failed operation on stderr, with a hint where one
// helps.
func (a *App) PrintError(err error) {
	switch {
	case a.Ctx != nil && errors.Is(a.Ctx.Err(), context.DeadlineExceeded):
		a.Report("deadline", fmt.Sprintf("no answer from thawd within %s (raise --timeout); the operation may still finish on the daemon", a.Timeout), "", "")
		return
	case a.Ctx != nil && errors.Is(a.Ctx.Err(), context.Canceled):
		a.Report("interrupted", "interrupted; the operation may still finish on the daemon", "", "")
		return
	}
	code, rid := "error", ""
	var ae *client.APIError
	if errors.As(err, &ae) {
		code, rid = ae.Code, ae.RequestID
	} else if errors.Is(err, client.ErrUnreachable) {
		code = "unreachable"
	}
	a.Report(code, err.Error(), rid, errorHint(a, err))
}

// errorHint is what to do about err, if thaw knows.
func errorHint(a *App, err error) string {
	switch {
	case errors.Is(err, client.ErrUnreachable) && errors.Is(err, os.ErrPermission):
		return "this user may not use thawd's socket: run as root or as a member of thawd's --socket-group, or use http with the API token (THAW_URL, THAW_TOKEN)"
	case errors.Is(err, client.ErrUnreachable):
		return "is thawd running? start it with 'thawd' or set THAW_URL"
	case errors.Is(err, client.ErrUnauthorized) && a.C != nil && a.C.HasToken():
		return "the daemon refused this API token: check THAW_TOKEN or THAW_TOKEN_FILE against thawd's token file (<data-dir>/token, or its --token-file)"
	case errors.Is(err, client.ErrUnauthorized):
		return fmt.Sprintf("thawd wants its API token over TCP: set THAW_TOKEN, or THAW_TOKEN_FILE to thawd's token file (<data-dir>/token, %s by default; readable by root only), or use the Unix socket (--url %s)",
			client.DefaultTokenFile, client.DefaultURL)
	}
	return ""
}

// UsageError is a bad command line found by a command itself (exit code 2).
type UsageError struct{ msg string }

func (e *UsageError) Error() string { return e.msg }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, args ...any) error {
	return &UsageError{msg: fmt.Sprintf(format, args...)}
}

// ExitCodeError ends thaw with code after the command reported the problem
// itself.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return fmt.Sprintf("exit code %d", e.Code) }
