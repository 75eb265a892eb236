// Package endpoint holds thaw endpoint: the plain HTTP endpoints that serve
// functions to their callers.
package endpoint

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "endpoint" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newEndpointCmd() }
