// Package completion holds thaw completion and makes TAB complete the
// arguments and flags that name daemon objects.
package completion

import (
	"maps"
	"slices"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "completion" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newCompletionCmd() }

// Register makes TAB complete, in every command of root, the arguments and
// flags that name daemon objects (registerCompletions).
func Register(a *cli.App, root *cobra.Command) { (&app{a}).registerCompletions(root) }

// ArgCommands are the paths ("thaw vm get") of the commands whose
// arguments complete from the daemon, sorted.
func ArgCommands() []string {
	return slices.Sorted(maps.Keys(argCompletions))
}
