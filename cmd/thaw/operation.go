package main

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *app) newOperationCmd() *cobra.Command {
	cmd := newGroupCmd("operation", "Show, list and wait for long operations",
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
	return newGetCmd("operation", "ID", oneRunE(a, (*client.Client).Operation, a.printOperation))
}

func (a *app) newOperationListCmd() *cobra.Command {
	return newListCmd("operations", listRunE(a, (*client.Client).ListOperations,
		[]string{"ID", "KIND", "TARGET", "STATE", "CREATED", "PROGRESS"},
		func(op *client.Operation) []string {
			return []string{op.ID, op.Kind, op.Target, op.State, fmtAge(op.CreatedAt), truncate(progressText(op), 50)}
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
		Args:    exactArgs("ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			op, err := a.follow(args[0])
			if err != nil {
				return err
			}
			return a.printResult(op)
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
		Args:    exactArgs("ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			op, err := a.c.CancelOperation(a.ctx, args[0])
			if err != nil {
				return err
			}
			if a.quiet {
				a.quietID(op.ID)
				return nil
			}
			return a.printOperation(op)
		},
	}
}

func (a *app) newOperationDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Forget finished operations",
		Long:    `Forget finished operations; what they made stays.`,
		Args:    minArgs("operation ID"),
		RunE: func(_ *cobra.Command, args []string) error {
			return a.deleteAll("operation", args, a.c.DeleteOperation)
		},
	}
}
