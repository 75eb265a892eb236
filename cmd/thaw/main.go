// Command thaw is the command-line client of thawd: it manages functions,
// VMs and snapshots and invokes functions, talking to the daemon only
// through the typed client package.
package main

import (
	"context"
	"io"
	"os"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func main() {
	ctx, stop := cli.SignalContext()
	code := execute(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// execute runs thaw with args on the given streams and returns its exit
// code.
func execute(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &cli.App{Stdin: stdin, Stdout: stdout, Stderr: stderr}
	return a.Execute(ctx, newRootCmd(a), args)
}
