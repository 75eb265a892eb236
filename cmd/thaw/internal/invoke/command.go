// Package invoke holds thaw invoke: run a function, cold or warm, and
// print its result, errors and timing.
package invoke

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "invoke" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newInvokeCmd() }
