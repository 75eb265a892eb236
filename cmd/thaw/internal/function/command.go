// Package function holds thaw function (create, list, get, delete,
// versions, restore, refresh), thaw deploy, thaw alias and thaw rollback:
// functions and their versions share the flags of a function's spec.
package function

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "function" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newFunctionCmd() }

// NewDeployCommand returns the "deploy" command.
func NewDeployCommand(a *cli.App) *cobra.Command { return (&app{a}).newDeployCmd() }

// NewAliasCommand returns the "alias" command and its subcommands.
func NewAliasCommand(a *cli.App) *cobra.Command { return (&app{a}).newAliasCmd() }

// NewRollbackCommand returns the "rollback" command.
func NewRollbackCommand(a *cli.App) *cobra.Command { return (&app{a}).newRollbackCmd() }
