// Package prepare holds thaw prepare: boot a function, snapshot it, record
// the pages it uses and build its strategies' artifacts.
package prepare

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "prepare" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newPrepareCmd() }
