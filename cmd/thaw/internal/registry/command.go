// Package registry holds thaw registry: list and delete the snapshots of
// the registry and collect its garbage.
package registry

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "registry" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newRegistryCmd() }
