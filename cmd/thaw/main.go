// Command thaw is the command-line client of thawd: it manages functions,
// VMs and snapshots and invokes functions, talking to the daemon only
// through the typed client package.
package main

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/thaw-dev/thaw/client"
)

func main() {
	ctx, stop := signalContext()
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{stdin: stdin, stdout: stdout, stderr: stderr}
	root := a.newRootCmd()
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	defer func() {
		if a.cancel != nil {
			a.cancel()
		}
	}()
	if err == nil {
		return exitOK
	}
	_ = a.resolveOutput() // errors are reported in the format asked for, whatever else is wrong
	if sig, ok := interruptedBy(ctx); ok {
		var ee *exitCodeError
		if !errors.As(err, &ee) { // not reported yet
			a.report("interrupted", "interrupted; the operation may still finish on the daemon", "", "")
		}
		return exitSignal + sig
	}
	var ee *exitCodeError
	if errors.As(err, &ee) {
		return ee.code // already reported
	}
	var ue *usageError
	if errors.As(err, &ue) || !a.inRun {
		// Errors cobra finds before a command runs (unknown commands and
		// flags, wrong number of arguments, ...) are usage errors too.
		a.report("usage", err.Error(), "", usageLine(cmd))
		return exitUsage
	}
	var ae *client.APIError
	if errors.As(err, &ae) && errors.Is(err, client.ErrInvalid) {
		// The daemon refused the request as malformed (400): a bad value given.
		a.report(ae.Code, err.Error(), ae.RequestID, usageLine(cmd))
		return exitUsage
	}
	a.printError(err)
	return exitError
}
