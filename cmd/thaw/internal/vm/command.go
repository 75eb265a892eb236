// Package vm holds thaw vm: boot, restore, list, get, pause, resume and
// delete VMs.
package vm

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "vm" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newVMCmd() }
