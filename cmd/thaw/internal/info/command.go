// Package info holds thaw info, thaw version and thaw openapi: what the
// daemon is, runs and serves.
package info

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "info" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newInfoCmd() }

// NewOpenAPICommand returns the "openapi" command.
func NewOpenAPICommand(a *cli.App) *cobra.Command { return (&app{a}).newOpenAPICmd() }

// NewVersionCommand returns the "version" command.
func NewVersionCommand(a *cli.App) *cobra.Command { return (&app{a}).newVersionCmd() }
