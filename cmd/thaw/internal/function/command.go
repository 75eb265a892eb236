// Package function holds thaw function: create, list, get, delete,
// restore and refresh functions (thaw function versions is the deploy
// package's).
package function

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "function" command and its subcommands, more
// among them (thaw adds "function versions", the deploy package's).
func NewCommand(a *cli.App, more ...*cobra.Command) *cobra.Command {
	return (&app{a}).newFunctionCmd(more...)
}
