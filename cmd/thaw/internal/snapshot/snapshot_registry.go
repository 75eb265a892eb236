package snapshot

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newSnapshotPushCmd() *cobra.Command {
	return a.OperationCmd(&cobra.Command{
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
		Args:    cli.ExactArgs("SNAPSHOT"),
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
						return cli.Usagef("--function takes NAME or NAME:VERSION (a version number; aliases are each node's own)")
					}
					req.Version = n
				}
			default:
				return cli.Usagef("give a snapshot id or --function, one of them")
			}
			req.Lazy = lazy
			return a.RunOperation(detach, func() (*client.Operation, error) { return a.C.StartPullSnapshot(a.Ctx, req) })
		},
	}
	cli.AddDetach(cmd, &detach)
	cmd.Flags().StringVar(&function, "function", "", "pull the newest snapshot pushed for this function (NAME:VERSION: of that version)")
	cmd.Flags().BoolVar(&lazy, "lazy", false, "leave the memory in the registry: restores fetch its pages on demand")
	return cmd
}
