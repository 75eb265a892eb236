// Package operation holds thaw operation: show, list, wait for, cancel
// and forget long operations.
package operation

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "operation" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newOperationCmd() }
