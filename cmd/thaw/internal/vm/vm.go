package vm

import (
	"context"
	"fmt"
	"slices"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newVMCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("vm", "Boot, restore, list, pause, resume and delete VMs",
		`A VM runs one function's guest. Boot one from scratch (to snapshot it), or
restore one from a snapshot and keep it running for warm invocations
(thaw invoke FUNCTION --vm ID).`)
	cmd.AddCommand(a.newVMBootCmd(), a.newVMRestoreCmd(), a.newVMListCmd(), a.newVMGetCmd(),
		a.newVMDeleteCmd(), a.newVMStateCmd("pause", "Pause a running VM", (*client.Client).PauseVM),
		a.newVMStateCmd("resume", "Resume a paused VM", (*client.Client).ResumeVM))
	return cmd
}

func (a *app) newVMBootCmd() *cobra.Command {
	return a.OperationCmd(&cobra.Command{
		Use:   "boot FUNCTION",
		Short: "Boot a VM for a function and wait until it is ready",
		Long: `Boot a fresh VM for a function and wait until its guest agent answers,
showing the boot's phases on stderr. The VM keeps running: snapshot it with
'thaw snapshot create', invoke it warm with 'thaw invoke FUNCTION --vm ID',
delete it with 'thaw vm delete'. The boot runs as an operation in thawd:
--detach (or Ctrl-C) leaves it running (see 'thaw operation').`,
		Example: `  thaw vm boot hello
  VM=$(thaw --json vm boot hello | jq -r .id) && thaw snapshot create "$VM"
  OP=$(thaw vm boot hello --detach) && thaw operation wait "$OP"`,
		Args: cli.ExactArgs("FUNCTION"),
	}, (*client.Client).StartBootVM)
}

func (a *app) newVMRestoreCmd() *cobra.Command {
	var strategy string
	cmd := &cobra.Command{
		Use:   "restore SNAPSHOT",
		Short: "Restore a VM from a snapshot and keep it running",
		Long: `Restore a VM from a snapshot, keep it running and print where the
restore's time went: snapshot checks, VMM start, device state load, and
from vCPUs resumed to the guest agent answering.

--strategy picks how guest memory is restored (see 'thaw info' for the
daemon's strategies; default: the daemon's).`,
		Example: `  thaw vm restore snap-0123abcd
  thaw vm restore snap-0123abcd --strategy STRATEGY`,
		Args: cli.ExactArgs("SNAPSHOT"),
		RunE: cli.OneRunE(a.App, func(c *client.Client, ctx context.Context, id string) (*client.VM, error) {
			return c.RestoreVM(ctx, id, strategy)
		}, a.PrintVM),
	}
	cmd.Flags().StringVarP(&strategy, "strategy", "s", "", "restore strategy (default: the daemon's; see 'thaw info')")
	return cmd
}

func (a *app) newVMListCmd() *cobra.Command {
	var state string
	cmd := cli.NewListCmd("VMs", func(*cobra.Command, []string) error {
		keep, err := vmStateFilter(state)
		if err != nil {
			return err
		}
		all, err := a.C.ListVMs(a.Ctx)
		if err != nil {
			return err
		}
		vms := slices.DeleteFunc(all, func(v client.VM) bool { return !keep(output.VMState(&v)) })
		head := []string{"ID", "FUNCTION", "STATE", "MEMORY", "PID", "FROM", "STARTUP", "CREATED"}
		if a.Wide {
			head = append(head, "STRATEGY", "VERSION", "IDLE UNTIL", "REASON")
		} else if slices.ContainsFunc(vms, func(v client.VM) bool { return v.State == "failed" }) {
			head = append(head, "REASON")
		}
		return cli.PrintTable(a.App, vms, head, func(v *client.VM) []string { return a.vmCells(v, len(head)) })
	})
	cmd.Long = `List VMs: by default the live ones (booting, running, idle, paused,
standby). --state picks others: failed and stopped VMs are history (a
failed one says why in REASON; delete them with 'thaw vm delete').

idle is a VM kept after a cold invocation for its function's next ones
(the keep-alive pool: thawd --keep-alive, a function's --keep-alive); its
API state is running, and it goes at IDLE UNTIL unless an invocation takes
it. standby is a VMM started ahead of a restore (the VMM pool).`
	cmd.Example = `  thaw vm list
  thaw vm list --state failed
  thaw vm delete $(thaw vm list --state failed -q)`
	cmd.Flags().StringVar(&state, "state", "live", "which VMs: live, booting, running, idle, paused, standby, ready, failed, stopped or all")
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(vmStates, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// vmStates are the values of vm list --state.
var vmStates = []cobra.Completion{"live", "booting", "running", "idle", "paused", "standby", "ready", "failed", "stopped", "all"}

// vmStateFilter says which states --state selects.
func vmStateFilter(state string) (func(string) bool, error) {
	switch state {
	case "all":
		return func(string) bool { return true }, nil
	case "live":
		return func(s string) bool { return s != "failed" && s != "stopped" }, nil
	}
	if !slices.Contains(vmStates, state) {
		return nil, cli.Usagef("--state %q: use live, booting, running, idle, paused, standby, ready, failed, stopped or all", state)
	}
	return func(s string) bool { return s == state }, nil
}

// vmCells is a VM's row of n columns (the table's head).
func (a *app) vmCells(v *client.VM, n int) []string {
	pid := "-"
	if v.PID > 0 {
		pid = fmt.Sprint(v.PID)
	}
	cells := []string{v.ID, v.Function, output.VMState(v), output.FmtMiB(v.MemoryMiB), pid, cli.VMSource(v), output.FmtMS(cli.StartupMS(v)), output.FmtAge(v.CreatedAt)}
	if a.Wide {
		version, until := "-", "-"
		if v.Version > 0 {
			version = fmt.Sprint(v.Version)
		}
		if v.IdleUntil != nil {
			until = output.FmtUntil(*v.IdleUntil)
		}
		return append(cells, output.OrDash(v.Strategy), version, until, output.OrDash(output.Truncate(v.Reason, 80)))
	}
	if len(cells) < n {
		reason := "-"
		if v.State == "failed" {
			reason = output.Truncate(v.Reason, 60)
		}
		cells = append(cells, reason)
	}
	return cells
}

func (a *app) newVMGetCmd() *cobra.Command {
	return cli.NewGetCmd("VM", "ID", cli.OneRunE(a.App, (*client.Client).GetVM, a.PrintVM))
}

// newVMStateCmd is "pause ID" or "resume ID": do changes the VM's state.
func (a *app) newVMStateCmd(verb, short string, do func(*client.Client, context.Context, string) (*client.VM, error)) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cli.ExactArgs("ID"),
		RunE: cli.OneRunE(a.App, do, func(v *client.VM) error {
			return a.PrintOr(v, "vm %s is %s\n", v.ID, output.VMState(v))
		}),
	}
}
