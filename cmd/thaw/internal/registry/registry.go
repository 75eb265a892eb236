package registry

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newRegistryCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("registry", "List, delete and garbage-collect the snapshots in the registry",
		`The snapshot registry is the S3-compatible object store thawd is configured
with (thawd --registry-config); 'thaw snapshot push' and 'pull' move snapshots
to and from it. These commands look after the registry itself.`)
	cmd.AddCommand(a.newRegistryListCmd(), a.newRegistryDeleteCmd(), a.newRegistryGCCmd())
	return cmd
}

func (a *app) newRegistryListCmd() *cobra.Command {
	cmd := cli.NewListCmd("the snapshots in the registry", cli.ListRunE(a.App, func(c *client.Client, ctx context.Context) ([]client.RegistrySnapshot, error) {
		return c.ListRegistrySnapshots(ctx)
	}, []string{"ID", "FUNCTION", "LATEST", "TRUSTED", "CHUNKS", "STORED", "DATA", "CREATED", "PUSHED", "SIGNER"},
		func(s *client.RegistrySnapshot) []string {
			latest := "-"
			if s.Latest {
				latest = "yes"
			}
			signer, trusted := output.OrDash(s.SignedBy), "yes"
			if s.Refused != "" {
				trusted = "no"
			}
			return []string{s.ID, s.Function, latest, trusted, fmt.Sprint(s.Chunks), output.FmtBytes(s.StoredBytes), output.FmtBytes(s.DataBytes),
				output.FmtAge(s.CreatedAt), output.FmtAge(s.PushedAt), signer}
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
		Args: cli.MinArgs("snapshot ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.DeleteAll("registry snapshot", args, a.C.DeleteRegistrySnapshot)
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
		Args: cli.ExactArgs(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if grace < 0 {
				return cli.Usagef("--grace takes 0 or more seconds")
			}
			req := client.GCRequest{DryRun: dryRun, GraceS: &grace}
			return a.RunOperation(detach, func() (*client.Operation, error) { return a.C.StartCollectRegistry(a.Ctx, req) })
		},
	}
	cli.AddDetach(cmd, &detach)
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count what would be deleted; delete nothing")
	cmd.Flags().IntVar(&grace, "grace", 3600, "keep unreferenced objects younger than this many seconds")
	return cmd
}
