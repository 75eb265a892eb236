// Package snapshot holds thaw snapshot: create, list, get, pin, unpin,
// evict, verify, copy, store, push, pull and delete snapshots.
package snapshot

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// app is the run of thaw that the commands of this package belong to.
type app struct{ *cli.App }

// NewCommand returns the "snapshot" command and its subcommands.
func NewCommand(a *cli.App) *cobra.Command { return (&app{a}).newSnapshotCmd() }
