// Package schedule holds thaw schedule: functions invoked asynchronously
// on a cron schedule.
package schedule

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "schedule" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newScheduleCmd() }
