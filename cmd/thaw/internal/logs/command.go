// Package logs holds thaw logs and thaw invocations: a function's logs
// and the invocation history.
package logs

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "logs" command.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newLogsCmd() }

// NewInvocationsCommand returns the "invocations" command.
func NewInvocationsCommand(a *cli.App) *cobra.Command { return (&app{a}).newInvocationsCmd() }
