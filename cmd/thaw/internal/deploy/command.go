// Package deploy holds thaw deploy, thaw function versions, thaw alias and
// thaw rollback: a function's immutable versions and the aliases that
// route to them.
package deploy

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "deploy" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newDeployCmd() }

// NewFunctionVersionsCommand returns the "versions" command of "function".
func NewFunctionVersionsCommand(a *cli.App) *cobra.Command { return (&app{a}).newFunctionVersionsCmd() }

// NewAliasCommand returns the "alias" command and its subcommands.
func NewAliasCommand(a *cli.App) *cobra.Command { return (&app{a}).newAliasCmd() }

// NewRollbackCommand returns the "rollback" command.
func NewRollbackCommand(a *cli.App) *cobra.Command { return (&app{a}).newRollbackCmd() }
