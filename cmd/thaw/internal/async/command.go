// Package async holds thaw async and thaw dlq: asynchronous invocations'
// settings and state, and the dead-letter queue.
package async

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "async" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newAsyncCmd() }

// NewDLQCommand returns the "dlq" command and its subcommands.
func NewDLQCommand(a *cli.App) *cobra.Command { return (&app{a}).newDLQCmd() }
