package snapshot

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newSnapshotCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("snapshot", "Create, list, show, verify and delete snapshots",
		`A snapshot is a booted VM's memory and device state, saved so that VMs
can be restored from it in milliseconds instead of booted.`, "snap")
	cmd.AddCommand(a.newSnapshotCreateCmd(), a.newSnapshotListCmd(), a.newSnapshotGetCmd(),
		a.newSnapshotVerifyCmd(), a.newSnapshotCopyCmd(), a.newSnapshotDeleteCmd(), a.newSnapshotStoreCmd(),
		a.newSnapshotEvictCmd(), a.newSnapshotPinCmd(), a.newSnapshotUnpinCmd(), a.newSnapshotPushCmd(), a.newSnapshotPullCmd())
	return cmd
}

func (a *app) newSnapshotPinCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pin SNAPSHOT",
		Short: "Pin a snapshot: garbage collection keeps it",
		Long: `Pin a snapshot: the daemon's garbage collection (thawd --snapshot-keep)
never deletes it.`,
		Args: cli.ExactArgs("SNAPSHOT"),
		RunE: cli.OneRunE(a.App, (*client.Client).PinSnapshot, a.SnapshotPrinter("pinned snapshot")),
	}
}

func (a *app) newSnapshotUnpinCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "unpin SNAPSHOT",
		Short: "Unpin a snapshot",
		Args:  cli.ExactArgs("SNAPSHOT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.C.UnpinSnapshot(a.Ctx, args[0]); err != nil {
				return err
			}
			return a.PrintOr(nil, "unpinned snapshot %s\n", args[0])
		},
	}
}

func (a *app) newSnapshotCreateCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "create VM",
		Short: "Snapshot a booted VM",
		Long: `Snapshot a booted VM: its memory and device state are saved and published
as a snapshot of the VM's function. Cold invocations of the function
restore from its newest snapshot.`,
		Example: `  thaw snapshot create vm-0123abcd`,
		Args:    cli.ExactArgs("VM"),
		RunE:    cli.OneRunE(a.App, (*client.Client).CreateSnapshot, a.SnapshotPrinter("created snapshot")),
	}
}

func (a *app) newSnapshotListCmd() *cobra.Command {
	var function string
	cmd := cli.NewListCmd("snapshots", cli.ListRunE(a.App, func(c *client.Client, ctx context.Context) ([]client.Snapshot, error) {
		return c.ListSnapshots(ctx, function)
	}, []string{"ID", "FUNCTION", "SOURCE VM", "MEMORY", "SIZE", "DISK", "CREATE", "PAUSE", "CREATED"},
		func(s *client.Snapshot) []string {
			return []string{s.ID, s.Function, output.OrDash(s.SourceVM), output.FmtMiB(s.MemoryMiB), output.FmtBytes(s.SizeBytes),
				output.FmtBytes(s.DiskBytes), output.FmtMS(s.CreateMS), output.FmtMS(s.PauseMS), output.FmtAge(s.CreatedAt)}
		}))
	cmd.Example = `  thaw snapshot list
  thaw snap ls --function hello`
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the snapshots of this function")
	return cmd
}

func (a *app) newSnapshotGetCmd() *cobra.Command {
	return cli.NewGetCmd("snapshot", "ID", cli.OneRunE(a.App, (*client.Client).GetSnapshot, a.SnapshotPrinter("")))
}

func (a *app) newSnapshotEvictCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "evict ID",
		Short: "Drop a snapshot's files from the daemon host's page cache",
		Long: `Drop a snapshot's files (memory, device state) and its strategies' artifacts
from the page cache of the daemon's host, so the next restores read them
from disk: honest cold measurements. Prints what is left cached.`,
		Args: cli.ExactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return cli.OneRunE(a.App, (*client.Client).EvictSnapshot, func(m *client.SnapshotMemory) error {
				return a.PrintOr(m, "evicted snapshot %s from the page cache\n", args[0])
			})(cmd, args)
		},
	}
}

func (a *app) newSnapshotVerifyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "verify ID",
		Short: "Fully re-check a snapshot's files and inputs",
		Long: `Fully re-check a snapshot: its files against their recorded hashes and the
inputs it was taken with (guest kernel and filesystems, VMM and its version,
accelerator, function code and VM shape). thaw exits
with code 1 and the daemon's reason if the snapshot is unusable.`,
		Args: cli.ExactArgs("ID"),
		RunE: cli.OneRunE(a.App, (*client.Client).VerifySnapshot, a.SnapshotPrinter("verified snapshot")),
	}
}

func (a *app) newSnapshotCopyCmd() *cobra.Command {
	return a.OperationCmd(&cobra.Command{
		Use:   "copy ID",
		Short: "Duplicate a snapshot under a new id",
		Long: `Duplicate a snapshot under a new id: device state, memory file and every
prepared strategy artifact, byte for byte and verified as written. The copy
shares no file with the original, so VMs restored from the two share no
page-cache pages (what the evaluation's burst from distinct snapshots
needs), and it is usable at once: nothing is prepared again. The copy runs
as an operation in thawd, its bytes shown on stderr; --detach (or Ctrl-C)
leaves it running (see 'thaw operation').`,
		Example: `  thaw snapshot copy snap-0123abcd`,
		Args:    cli.ExactArgs("ID"),
	}, (*client.Client).StartCopySnapshot)
}

func (a *app) newSnapshotDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots",
		Long: `Delete one or more snapshots. All are tried; thaw exits with code 1 if any
of them could not be deleted.`,
		Args: cli.MinArgs("snapshot ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.DeleteAll("snapshot", args, a.C.DeleteSnapshot)
		},
	}
}

func (a *app) newSnapshotStoreCmd() *cobra.Command {
	var remove, detach bool
	cmd := &cobra.Command{
		Use:   "store [ID...]",
		Short: "Place snapshots in the memory store (premap), or show the store",
		Long: `Place snapshots' memory in the snapshot memory store (tmpfs, hugetlbfs, or
persistent memory: a DAX filesystem or a device-DAX device), where the
premap strategy maps it from:
the copy is verified against the snapshot and shared by every VM restored
from it. With --remove, take them out again. Without an ID, show the
store's tier, capacity, use and entries. Each copy runs as an operation in
thawd, shown on stderr; --detach starts them all, prints their ids and
returns (Ctrl-C leaves the one followed running; see 'thaw operation').`,
		Example: `  thaw snapshot store snap-0123abcd
  thaw invoke hello --strategy premap
  thaw snapshot store
  thaw snapshot store --remove snap-0123abcd`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if remove {
					return cli.Usagef("--remove needs a snapshot ID")
				}
				in, err := a.C.Store(a.Ctx)
				if err != nil {
					return err
				}
				return a.printStore(in)
			}
			if remove {
				if detach {
					return cli.Usagef("--detach applies to placing snapshots in the store, not to --remove")
				}
				return a.DeleteAll("stored snapshot", args, a.C.UnstoreSnapshot)
			}
			for _, id := range args {
				if err := a.RunOperation(detach, func() (*client.Operation, error) { return a.C.StartStoreSnapshot(a.Ctx, id) }); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the snapshots from the store")
	cli.AddDetach(cmd, &detach)
	return cmd
}

func (a *app) printStore(in *client.StoreInfo) error {
	switch {
	case a.JSON:
		return a.PrintJSON(in)
	case a.Quiet:
		for _, e := range in.Entries {
			a.QuietID(e.Snapshot)
		}
		return nil
	}
	if !in.Available {
		fmt.Fprintf(a.Stdout, "no memory store: %s\n", termtext.Line(in.Error))
		return nil
	}
	w := output.NewTable(a.Stdout)
	output.Row(w, "Dir:", in.Dir)
	kind := in.Kind
	switch {
	case in.Kind == "devdax":
		kind += " (" + output.FmtBytes(in.PageSize) + " units)"
	case in.PageSize > 4096:
		kind += " (" + output.FmtBytes(in.PageSize) + " pages)"
	}
	output.Row(w, "Kind:", kind)
	output.Row(w, "Capacity:", output.FmtBytes(in.CapacityBytes))
	output.Row(w, "Free:", output.FmtBytes(in.FreeBytes))
	output.Row(w, "Used by thaw:", output.FmtBytes(in.UsedBytes))
	switch in.Kind {
	case "hugetlbfs":
		output.Row(w, "Reserved by clones:", output.FmtBytes(in.ReservedBytes))
	case "devdax":
		output.Row(w, "Held by clones:", fmt.Sprintf("%s (%d live)", output.FmtBytes(in.ReservedBytes), in.Clones))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(in.Entries) == 0 {
		return nil
	}
	fmt.Fprintln(a.Stdout)
	w = output.NewTable(a.Stdout)
	output.Row(w, "SNAPSHOT", "GUEST MEMORY", "STORE BYTES", "REGIONS", "STORED")
	for _, e := range in.Entries {
		output.Row(w, e.Snapshot, output.FmtBytes(e.Size), output.FmtBytes(e.Bytes), fmt.Sprint(e.Regions), output.FmtAge(e.StoredAt))
	}
	return w.Flush()
}
