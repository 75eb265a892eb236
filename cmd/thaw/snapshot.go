package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newSnapshotCmd() *cobra.Command {
	cmd := newGroupCmd("snapshot", "Create, list, show, verify and delete snapshots",
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
		Args: exactArgs("SNAPSHOT"),
		RunE: oneRunE(a, (*client.Client).PinSnapshot, a.snapshotPrinter("pinned snapshot")),
	}
}

func (a *app) newSnapshotUnpinCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "unpin SNAPSHOT",
		Short: "Unpin a snapshot",
		Args:  exactArgs("SNAPSHOT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := a.c.UnpinSnapshot(a.ctx, args[0]); err != nil {
				return err
			}
			return a.printOr(nil, "unpinned snapshot %s\n", args[0])
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
		Args:    exactArgs("VM"),
		RunE:    oneRunE(a, (*client.Client).CreateSnapshot, a.snapshotPrinter("created snapshot")),
	}
}

func (a *app) newSnapshotListCmd() *cobra.Command {
	var function string
	cmd := newListCmd("snapshots", listRunE(a, func(c *client.Client, ctx context.Context) ([]client.Snapshot, error) {
		return c.ListSnapshots(ctx, function)
	}, []string{"ID", "FUNCTION", "SOURCE VM", "MEMORY", "SIZE", "DISK", "CREATE", "PAUSE", "CREATED"},
		func(s *client.Snapshot) []string {
			return []string{s.ID, s.Function, orDash(s.SourceVM), fmtMiB(s.MemoryMiB), fmtBytes(s.SizeBytes),
				fmtBytes(s.DiskBytes), fmtMS(s.CreateMS), fmtMS(s.PauseMS), fmtAge(s.CreatedAt)}
		}))
	cmd.Example = `  thaw snapshot list
  thaw snap ls --function hello`
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the snapshots of this function")
	return cmd
}

func (a *app) newSnapshotGetCmd() *cobra.Command {
	return newGetCmd("snapshot", "ID", oneRunE(a, (*client.Client).GetSnapshot, a.snapshotPrinter("")))
}

func (a *app) newSnapshotEvictCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "evict ID",
		Short: "Drop a snapshot's files from the daemon host's page cache",
		Long: `Drop a snapshot's files (memory, device state) and its strategies' artifacts
from the page cache of the daemon's host, so the next restores read them
from disk: honest cold measurements. Prints what is left cached.`,
		Args: exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return oneRunE(a, (*client.Client).EvictSnapshot, func(m *client.SnapshotMemory) error {
				return a.printOr(m, "evicted snapshot %s from the page cache\n", args[0])
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
		Args: exactArgs("ID"),
		RunE: oneRunE(a, (*client.Client).VerifySnapshot, a.snapshotPrinter("verified snapshot")),
	}
}

func (a *app) newSnapshotCopyCmd() *cobra.Command {
	return a.operationCmd(&cobra.Command{
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
		Args:    exactArgs("ID"),
	}, (*client.Client).StartCopySnapshot)
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
					return usagef("--remove needs a snapshot ID")
				}
				in, err := a.c.Store(a.ctx)
				if err != nil {
					return err
				}
				return a.printStore(in)
			}
			if remove {
				if detach {
					return usagef("--detach applies to placing snapshots in the store, not to --remove")
				}
				return a.deleteAll("stored snapshot", args, a.c.UnstoreSnapshot)
			}
			for _, id := range args {
				if err := a.runOperation(detach, func() (*client.Operation, error) { return a.c.StartStoreSnapshot(a.ctx, id) }); err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&remove, "remove", false, "remove the snapshots from the store")
	addDetach(cmd, &detach)
	return cmd
}

func (a *app) printStore(in *client.StoreInfo) error {
	switch {
	case a.json:
		return a.printJSON(in)
	case a.quiet:
		for _, e := range in.Entries {
			a.quietID(e.Snapshot)
		}
		return nil
	}
	if !in.Available {
		fmt.Fprintf(a.stdout, "no memory store: %s\n", termtext.Line(in.Error))
		return nil
	}
	w := newTable(a.stdout)
	row(w, "Dir:", in.Dir)
	kind := in.Kind
	switch {
	case in.Kind == "devdax":
		kind += " (" + fmtBytes(in.PageSize) + " units)"
	case in.PageSize > 4096:
		kind += " (" + fmtBytes(in.PageSize) + " pages)"
	}
	row(w, "Kind:", kind)
	row(w, "Capacity:", fmtBytes(in.CapacityBytes))
	row(w, "Free:", fmtBytes(in.FreeBytes))
	row(w, "Used by thaw:", fmtBytes(in.UsedBytes))
	switch in.Kind {
	case "hugetlbfs":
		row(w, "Reserved by clones:", fmtBytes(in.ReservedBytes))
	case "devdax":
		row(w, "Held by clones:", fmt.Sprintf("%s (%d live)", fmtBytes(in.ReservedBytes), in.Clones))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	if len(in.Entries) == 0 {
		return nil
	}
	fmt.Fprintln(a.stdout)
	w = newTable(a.stdout)
	row(w, "SNAPSHOT", "GUEST MEMORY", "STORE BYTES", "REGIONS", "STORED")
	for _, e := range in.Entries {
		row(w, e.Snapshot, fmtBytes(e.Size), fmtBytes(e.Bytes), fmt.Sprint(e.Regions), fmtAge(e.StoredAt))
	}
	return w.Flush()
}
