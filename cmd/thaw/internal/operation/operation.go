package operation

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newOperationCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("operation", "Show, list and wait for long operations",
		`Booting, preparing, placing a snapshot in the memory store, copying,
pushing and pulling a snapshot and collecting the registry's garbage run as
operations in thawd: 'thaw vm boot', 'thaw prepare', 'thaw snapshot store',
'thaw snapshot copy', 'thaw snapshot push', 'thaw snapshot pull' and
'thaw registry gc' start one and follow it, showing its progress on stderr. With --detach they print the operation's id
and return at once; Ctrl-C while following detaches too. The work goes on
in the daemon either way; follow it again with 'thaw operation wait ID'.

thawd keeps finished operations for an hour (the newest 1000); none
survives a daemon restart, but what they made (VMs, snapshots) does.
'thaw operation cancel ID' stops a running one.`, "op")
	cmd.AddCommand(a.newOperationGetCmd(), a.newOperationListCmd(), a.newOperationWaitCmd(), a.newOperationCancelCmd(),
		a.newOperationDeleteCmd())
	return cmd
}

func (a *app) newOperationGetCmd() *cobra.Command {
	return cli.NewGetCmd("operation", "ID", cli.OneRunE(a.App, (*client.Client).Operation, a.PrintOperation))
}

func (a *app) newOperationListCmd() *cobra.Command {
	return cli.NewListCmd("operations", cli.ListRunE(a.App, (*client.Client).ListOperations,
		[]string{"ID", "KIND", "TARGET", "STATE", "CREATED", "PROGRESS"},
		func(op *client.Operation) []string {
			return []string{op.ID, op.Kind, op.Target, op.State, output.FmtAge(op.CreatedAt), output.Truncate(cli.ProgressText(op), 50)}
		}))
}

func (a *app) newOperationWaitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "wait ID",
		Short: "Follow an operation until it ends and print its result",
		Long: `Follow an operation, showing its progress on stderr, until it has ended;
then print its result as the command that started it would have (or fail
with its error). Ctrl-C stops following; the operation goes on.`,
		Example: `  OP=$(thaw prepare hello --detach) && thaw operation wait "$OP"`,
		Args:    cli.ExactArgs("ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			op, err := a.Follow(args[0])
			if err != nil {
				return err
			}
			return a.PrintResult(op)
		},
	}
}

func (a *app) newOperationCancelCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a running operation",
		Long: `Cancel a running operation: the daemon stops its work, cleans up what the
work had made as after any failure of it (a canceled boot leaves no VM), and
answers once the work has stopped; thaw then prints the operation, failed
with code canceled (or succeeded, if its work finished first). An operation
that has ended cannot be canceled (exit code 1).`,
		Example: `  OP=$(thaw prepare hello --detach) && thaw operation cancel "$OP"`,
		Args:    cli.ExactArgs("ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			op, err := a.C.CancelOperation(a.Ctx, args[0])
			if err != nil {
				return err
			}
			if a.Quiet {
				a.QuietID(op.ID)
				return nil
			}
			return a.PrintOperation(op)
		},
	}
}

func (a *app) newOperationDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Forget finished operations",
		Long:    `Forget finished operations; what they made stays.`,
		Args:    cli.MinArgs("operation ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.DeleteAll("operation", args, a.C.DeleteOperation)
		},
	}
}
