package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *app) newSnapshotCmd() *cobra.Command {
	cmd := newGroupCmd("snapshot", "Create, list, show, verify and delete snapshots",
		`A snapshot is a booted VM's memory and device state, saved so that VMs
can be restored from it in milliseconds instead of booted.`, "snap")
	cmd.AddCommand(a.newSnapshotCreateCmd(), a.newSnapshotListCmd(), a.newSnapshotGetCmd(),
		a.newSnapshotVerifyCmd(), a.newSnapshotDeleteCmd())
	return cmd
}

func (a *app) newSnapshotCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create VM",
		Short: "Snapshot a booted VM",
		Long: `Snapshot a booted VM: its memory and device state are saved and published
as a snapshot of the VM's function. Cold invocations of the function
restore from its newest snapshot.`,
		Example: `  thaw snapshot create vm-0123abcd`,
		Args:    exactArgs("VM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.c.CreateSnapshot(a.ctx, args[0])
			if err != nil {
				return err
			}
			return a.printSnapshot(s, "created snapshot")
		},
	}
}

func (a *app) newSnapshotListCmd() *cobra.Command {
	var function string
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List snapshots",
		Example: `  thaw snapshot list
  thaw snap ls --function hello`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			snaps, err := a.c.ListSnapshots(a.ctx, function)
			if err != nil {
				return err
			}
			if a.json {
				return printList(a, snaps)
			}
			w := newTable(a.stdout)
			row(w, "ID", "FUNCTION", "SOURCE VM", "MEMORY", "SIZE", "DISK", "CREATE", "PAUSE", "CREATED")
			for _, s := range snaps {
				row(w, s.ID, s.Function, orDash(s.SourceVM), fmtMiB(s.MemoryMiB), fmtBytes(s.SizeBytes),
					fmtBytes(s.DiskBytes), fmtMS(s.CreateMS), fmtMS(s.PauseMS), fmtAge(s.CreatedAt))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the snapshots of this function")
	return cmd
}

func (a *app) newSnapshotGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"show"},
		Short:   "Show a snapshot",
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.c.GetSnapshot(a.ctx, args[0])
			if err != nil {
				return err
			}
			return a.printSnapshot(s, "")
		},
	}
}

func (a *app) newSnapshotVerifyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "verify ID",
		Short: "Fully re-check a snapshot's files and inputs",
		Long: `Fully re-check a snapshot: its files against their recorded hashes and the
inputs it was taken with (guest kernel and filesystems, QEMU version,
accelerator, function code and VM shape). thaw exits
with code 1 and the daemon's reason if the snapshot is unusable.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := a.c.VerifySnapshot(a.ctx, args[0])
			if err != nil {
				return err
			}
			return a.printSnapshot(s, "verified snapshot")
		},
	}
}

func (a *app) newSnapshotDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots",
		Long: `Delete one or more snapshots. All are tried; thaw exits with code 1 if any
of them could not be deleted.`,
		Args: minArgs("snapshot ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.deleteAll("snapshot", args, a.c.DeleteSnapshot)
		},
	}
}

// printSnapshot prints a snapshot, after a headline saying what happened
// to it if there is one.
func (a *app) printSnapshot(s *client.Snapshot, headline string) error {
	if a.json {
		return a.printJSON(s)
	}
	if headline != "" {
		fmt.Fprintf(a.stdout, "%s %s\n", headline, s.ID)
	}
	w := newTable(a.stdout)
	row(w, "ID:", s.ID)
	row(w, "Function:", s.Function)
	row(w, "Source VM:", orDash(s.SourceVM))
	row(w, "Memory:", fmtMiB(s.MemoryMiB))
	row(w, "Size:", fmtBytes(s.SizeBytes))
	row(w, "Disk:", fmtBytes(s.DiskBytes))
	row(w, "Create:", fmtMS(s.CreateMS))
	row(w, "Pause:", fmtMS(s.PauseMS))
	row(w, "Dir:", orDash(s.Dir))
	row(w, "Created:", fmtTime(s.CreatedAt))
	return w.Flush()
}
