// Package secret holds thaw secret: set, list, get and delete secrets.
package secret

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "secret" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newSecretCmd() }
