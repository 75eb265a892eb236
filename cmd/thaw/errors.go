package main

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
	exitOK       = 0   // success
	exitError    = 1   // any error: daemon error, unreachable daemon, ...
	exitUsage    = 2   // usage error: unknown command or flag, bad arguments or flag values (the daemon's 400 too), a missing input file
	exitFunction = 3   // the function ran but raised an exception
	exitSignal   = 128 // plus the signal's number: interrupted (SIGINT: 130, SIGTERM: 143)
)

// usageLine says where cmd's usage is.
func usageLine(cmd *cobra.Command) string {
	return fmt.Sprintf("Run '%s --help' for usage.", cmd.CommandPath())
}

// printError reports a failed operation on stderr, with a hint where one
// helps.
func (a *app) printError(err error) {
	switch {
	case a.ctx != nil && errors.Is(a.ctx.Err(), context.DeadlineExceeded):
		a.report("deadline", fmt.Sprintf("no answer from thawd within %s (raise --timeout); the operation may still finish on the daemon", a.timeout), "", "")
		return
	case a.ctx != nil && errors.Is(a.ctx.Err(), context.Canceled):
		a.report("interrupted", "interrupted; the operation may still finish on the daemon", "", "")
		return
	}
	code, rid := "error", ""
	var ae *client.APIError
	if errors.As(err, &ae) {
		code, rid = ae.Code, ae.RequestID
	} else if errors.Is(err, client.ErrUnreachable) {
		code = "unreachable"
	}
	a.report(code, err.Error(), rid, errorHint(a, err))
}

// errorHint is what to do about err, if thaw knows.
func errorHint(a *app, err error) string {
	switch {
	case errors.Is(err, client.ErrUnreachable) && errors.Is(err, os.ErrPermission):
		return "this user may not use thawd's socket: run as root or as a member of thawd's --socket-group, or use http with the API token (THAW_URL, THAW_TOKEN)"
	case errors.Is(err, client.ErrUnreachable):
		return "is thawd running? start it with 'thawd' or set THAW_URL"
	case errors.Is(err, client.ErrUnauthorized) && a.c != nil && a.c.HasToken():
		return "the daemon refused this API token: check THAW_TOKEN or THAW_TOKEN_FILE against thawd's token file (<data-dir>/token, or its --token-file)"
	case errors.Is(err, client.ErrUnauthorized):
		return fmt.Sprintf("thawd wants its API token over TCP: set THAW_TOKEN, or THAW_TOKEN_FILE to thawd's token file (<data-dir>/token, %s by default; readable by root only), or use the Unix socket (--url %s)",
			client.DefaultTokenFile, client.DefaultURL)
	}
	return ""
}

// usageError is a bad command line found by a command itself (exit code 2).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitCodeError ends thaw with code after the command reported the problem
// itself.
type exitCodeError struct{ code int }

func (e *exitCodeError) Error() string { return fmt.Sprintf("exit code %d", e.code) }
