package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *app) newSnapshotPushCmd() *cobra.Command {
	return a.operationCmd(&cobra.Command{
		Use:   "push SNAPSHOT",
		Short: "Upload a snapshot to the snapshot registry",
		Long: `Upload a snapshot to the registry thawd is configured with (S3-compatible
object storage, thawd --registry-config): its files in content-addressed,
compressed chunks, all-zero chunks left out and chunks the registry holds
already (shared with other snapshots, or sent by an interrupted push of this
one) not sent again; the snapshot's manifest goes last, so other nodes only
ever see it complete. The function's record and code go too, so any node can
pull it. Runs as an operation in thawd, its bytes shown on stderr; --detach
(or Ctrl-C) leaves it running (see 'thaw operation').`,
		Example: `  thaw snapshot push snap-0123abcd`,
		Args:    exactArgs("SNAPSHOT"),
	}, (*client.Client).StartPushSnapshot)
}

func (a *app) newSnapshotPullCmd() *cobra.Command {
	var (
		detach   bool
		function string
		lazy     bool
	)
	cmd := &cobra.Command{
		Use:   "pull [SNAPSHOT] [--function FUNCTION[:VERSION]]",
		Short: "Fetch a snapshot from the snapshot registry",
		Long: `Fetch a snapshot from the registry: by id, or with --function the newest
snapshot pushed for that function (with :VERSION, that version's). A
function this node does not have is created from the registry's record of
it; a version is entered under the number it was deployed with, so
NAME:VERSION runs the same code on every node. Every chunk is verified before it
is used, and the whole snapshot against its manifest before it enters the
catalog; an interrupted pull keeps the chunks it verified (in the node's
chunk cache) and a second one resumes. With --lazy everything but the memory
file comes: the snapshot's pages are fetched on demand by its restores
(vanilla, reap, faasnap; the other strategies pull the memory first), and a
later pull of the same snapshot completes it in place. Runs as an operation
in thawd, its bytes shown on stderr; --detach (or Ctrl-C) leaves it running.`,
		Example: `  thaw snapshot pull snap-0123abcd
  thaw snapshot pull --function hello && thaw invoke hello --strategy faasnap
  thaw snapshot pull --lazy --function hello   # memory stays in the registry
  thaw snapshot pull --function hello:3`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var req client.PullRequest
			switch {
			case len(args) == 1 && function == "":
				req.Snapshot = args[0]
			case len(args) == 0 && function != "":
				name, version, versioned := strings.Cut(function, ":")
				req.Function = name
				if versioned {
					n, err := strconv.Atoi(version)
					if err != nil || n <= 0 {
						return usagef("--function takes NAME or NAME:VERSION (a version number; aliases are each node's own)")
					}
					req.Version = n
				}
			default:
				return usagef("give a snapshot id or --function, one of them")
			}
			req.Lazy = lazy
			return a.runOperation(detach, func() (*client.Operation, error) { return a.c.StartPullSnapshot(a.ctx, req) })
		},
	}
	addDetach(cmd, &detach)
	cmd.Flags().StringVar(&function, "function", "", "pull the newest snapshot pushed for this function (NAME:VERSION: of that version)")
	cmd.Flags().BoolVar(&lazy, "lazy", false, "leave the memory in the registry: restores fetch its pages on demand")
	return cmd
}

func (a *app) printPush(r *client.PushResult) error {
	return a.printObject(r, "pushed snapshot", r.Snapshot, func(w io.Writer) {
		row(w, "Function:", r.Function)
		row(w, "Chunks:", fmt.Sprintf("%d of %s (non-zero)", r.Chunks, fmtBytes(r.ChunkSize)))
		row(w, "Uploaded:", fmt.Sprintf("%d chunks, %s (the rest were in the registry)", r.Uploaded, fmtBytes(r.UploadedBytes)))
		row(w, "Stored:", fmt.Sprintf("%s compressed of %s", fmtBytes(r.StoredBytes), fmtBytes(r.DataBytes)))
		row(w, "Took:", fmtMS(r.PushMS))
	})
}

func (a *app) printPull(r *client.PullResult) error {
	switch {
	case a.json:
		return a.printJSON(r)
	case a.quiet:
		a.quietID(r.Snapshot.ID)
		return nil
	}
	if err := a.snapshotPrinter("pulled snapshot")(r.Snapshot); err != nil {
		return err
	}
	w := newTable(a.stdout)
	if r.FunctionCreated {
		row(w, "Function:", r.Snapshot.Function+" (created from the registry)")
	}
	if r.Completed {
		row(w, "Completed:", "its memory was in the registry and is now local")
	}
	row(w, "Fetched:", fmt.Sprintf("%d chunks, %s", r.FetchedChunks, fmtBytes(r.FetchedBytes)))
	row(w, "From cache:", fmt.Sprintf("%d chunks", r.CachedChunks))
	row(w, "Took:", fmtMS(r.PullMS))
	return w.Flush()
}

func (a *app) newRegistryCmd() *cobra.Command {
	cmd := newGroupCmd("registry", "List, delete and garbage-collect the snapshots in the registry",
		`The snapshot registry is the S3-compatible object store thawd is configured
with (thawd --registry-config); 'thaw snapshot push' and 'pull' move snapshots
to and from it. These commands look after the registry itself.`)
	cmd.AddCommand(a.newRegistryListCmd(), a.newRegistryDeleteCmd(), a.newRegistryGCCmd())
	return cmd
}

func (a *app) newRegistryListCmd() *cobra.Command {
	cmd := newListCmd("the snapshots in the registry", listRunE(a, func(c *client.Client, ctx context.Context) ([]client.RegistrySnapshot, error) {
		return c.ListRegistrySnapshots(ctx)
	}, []string{"ID", "FUNCTION", "LATEST", "TRUSTED", "CHUNKS", "STORED", "DATA", "CREATED", "PUSHED", "SIGNER"},
		func(s *client.RegistrySnapshot) []string {
			latest := "-"
			if s.Latest {
				latest = "yes"
			}
			signer, trusted := orDash(s.SignedBy), "yes"
			if s.Refused != "" {
				trusted = "no"
			}
			return []string{s.ID, s.Function, latest, trusted, fmt.Sprint(s.Chunks), fmtBytes(s.StoredBytes), fmtBytes(s.DataBytes),
				fmtAge(s.CreatedAt), fmtAge(s.PushedAt), signer}
		}))
	cmd.Long = `List the snapshots pushed to the registry, oldest first. LATEST marks the one
its function's record names: what 'thaw snapshot pull --function' and nodes
importing the function get. STORED and DATA are the compressed and
uncompressed bytes of its distinct chunks; chunks shared between snapshots
count in each. SIGNER is the id of the key its manifest is signed with;
TRUSTED no marks one this node refuses to pull or import (not signed, signed
by a key it does not trust, changed after signing, or moved from another
object: --json says which); 'thaw registry delete' removes it.`
	return cmd
}

func (a *app) newRegistryDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Delete snapshots from the registry",
		Long: `Delete snapshots from the registry: their manifests go at once, their chunks
at the next 'thaw registry gc' unless another snapshot shares them. When a
function's newest snapshot is deleted, its record moves to the next newest,
or goes with the last one. Copies that nodes pulled stay on those nodes.
All are tried; thaw exits with code 1 if any could not be deleted.`,
		Args: minArgs("snapshot ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.deleteAll("registry snapshot", args, a.c.DeleteRegistrySnapshot)
		},
	}
}

func (a *app) newRegistryGCCmd() *cobra.Command {
	var (
		detach bool
		dryRun bool
		grace  int
	)
	cmd := &cobra.Command{
		Use:   "gc",
		Short: "Delete the registry's chunks that no snapshot uses",
		Long: `Delete the chunks and code archives that no snapshot or function in the
registry names and that are older than --grace. It reads every manifest first
and deletes nothing if one cannot be read. Pushes and collections keep apart
through lease objects in the bucket: a collection waits for running pushes,
and a push waits while a collection runs. Runs as an operation in thawd;
--detach (or Ctrl-C) leaves it running.`,
		Example: `  thaw registry gc --dry-run
  thaw registry delete snap-0123abcd && thaw registry gc --grace 0`,
		Args: exactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return usagef("--grace takes 0 or more seconds")
			}
			req := client.GCRequest{DryRun: dryRun, GraceS: &grace}
			return a.runOperation(detach, func() (*client.Operation, error) { return a.c.StartCollectRegistry(a.ctx, req) })
		},
	}
	addDetach(cmd, &detach)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().IntVar(&grace, "grace", 3600, "keep unreferenced objects younger than this many seconds")
	return cmd
}

func (a *app) printGC(r *client.GCResult) error {
	what := "collected"
	if r.DryRun {
		what = "dry run, nothing deleted"
	}
	if a.quiet {
		return nil
	}
	return a.printObject(r, "registry", what, func(w io.Writer) {
		row(w, "Read:", fmt.Sprintf("%d snapshots, %d functions, %d chunks", r.Snapshots, r.Functions, r.Chunks))
		row(w, "Deleted:", fmt.Sprintf("%d chunks, %d code archives, %s", r.ChunksDeleted, r.CodeDeleted, fmtBytes(r.BytesDeleted)))
		row(w, "Kept:", fmt.Sprintf("%s (%d unused chunks within the grace)", fmtBytes(r.BytesKept), r.ChunksYoung))
		if r.StaleLeases > 0 {
			row(w, "Stale leases:", fmt.Sprintf("%d removed (writers that died)", r.StaleLeases))
		}
		row(w, "Took:", fmtMS(r.GCMS))
	})
}
