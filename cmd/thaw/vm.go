package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *app) newVMCmd() *cobra.Command {
	cmd := newGroupCmd("vm", "Boot, restore, list, pause, resume and delete VMs",
		`A VM runs one function's guest. Boot one from scratch (to snapshot it), or
restore one from a snapshot and keep it running for warm invocations
(thaw invoke FUNCTION --vm ID).`)
	cmd.AddCommand(a.newVMBootCmd(), a.newVMRestoreCmd(), a.newVMListCmd(), a.newVMGetCmd(),
		a.newVMDeleteCmd(), a.newVMPauseCmd(), a.newVMResumeCmd())
	return cmd
}

func (a *app) newVMBootCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "boot FUNCTION",
		Short: "Boot a VM for a function and wait until it is ready",
		Long: `Boot a fresh VM for a function and wait until its guest agent answers.
The VM keeps running: snapshot it with 'thaw snapshot create', invoke it
warm with 'thaw invoke FUNCTION --vm ID', delete it with 'thaw vm delete'.`,
		Example: `  thaw vm boot hello
  VM=$(thaw --json vm boot hello | jq -r .id) && thaw snapshot create "$VM"`,
		Args: exactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.c.BootVM(a.ctx, args[0])
			if err != nil {
				return err
			}
			return a.printVM(v)
		},
	}
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
		Args: exactArgs("SNAPSHOT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.c.RestoreVM(a.ctx, args[0], strategy)
			if err != nil {
				return err
			}
			return a.printVM(v)
		},
	}
	cmd.Flags().StringVarP(&strategy, "strategy", "s", "", "restore strategy (default: the daemon's; see 'thaw info')")
	return cmd
}

func (a *app) newVMListCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List VMs",
		Args:    exactArgs(),
		RunE: func(cmd *cobra.Command, args []string) error {
			vms, err := a.c.ListVMs(a.ctx)
			if err != nil {
				return err
			}
			if a.json {
				return printList(a, vms)
			}
			failed := false
			for _, v := range vms {
				failed = failed || v.State == "failed"
			}
			w := newTable(a.stdout)
			head := []string{"ID", "FUNCTION", "STATE", "MEMORY", "PID", "FROM", "STARTUP", "CREATED"}
			if failed {
				head = append(head, "REASON")
			}
			row(w, head...)
			for _, v := range vms {
				pid := "-"
				if v.PID > 0 {
					pid = fmt.Sprint(v.PID)
				}
				cells := []string{v.ID, v.Function, v.State, fmtMiB(v.MemoryMiB), pid, vmSource(&v), fmtMS(startupMS(&v)), fmtAge(v.CreatedAt)}
				if v.State == "failed" {
					cells = append(cells, truncate(v.Reason, 60))
				}
				row(w, cells...)
			}
			return w.Flush()
		},
	}
}

func (a *app) newVMGetCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "get ID",
		Aliases: []string{"show"},
		Short:   "Show a VM",
		Args:    exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.c.GetVM(a.ctx, args[0])
			if err != nil {
				return err
			}
			return a.printVM(v)
		},
	}
}

func (a *app) newVMDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Stop and forget VMs",
		Long: `Stop and forget one or more VMs. All are tried; thaw exits with code 1 if
any of them could not be deleted.`,
		Example: `  thaw vm delete vm-0123abcd
  thaw vm delete $(thaw --json vm list | jq -r '.items[] | select(.state == "failed") | .id')`,
		Args: minArgs("VM ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.deleteAll("vm", args, a.c.DeleteVM)
		},
	}
}

func (a *app) newVMPauseCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID",
		Short: "Pause a running VM",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.c.PauseVM(a.ctx, args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "vm %s is %s\n", v.ID, v.State)
			return nil
		},
	}
}

func (a *app) newVMResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Resume a paused VM",
		Args:  exactArgs("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			v, err := a.c.ResumeVM(a.ctx, args[0])
			if err != nil {
				return err
			}
			if a.json {
				return a.printJSON(v)
			}
			fmt.Fprintf(a.stdout, "vm %s is %s\n", v.ID, v.State)
			return nil
		},
	}
}

// vmSource says where a VM came from: a boot or a snapshot.
func vmSource(v *client.VM) string {
	if v.Snapshot != "" {
		return v.Snapshot
	}
	return "boot"
}

// startupMS is how long a VM took to become ready: its boot, or its
// restore's setup and resume.
func startupMS(v *client.VM) float64 {
	if v.Restore != nil {
		return v.Restore.SetupMS + v.Restore.ResumeMS
	}
	return v.BootMS
}

func (a *app) printVM(v *client.VM) error {
	if a.json {
		return a.printJSON(v)
	}
	w := newTable(a.stdout)
	row(w, "ID:", v.ID)
	row(w, "Function:", v.Function)
	row(w, "State:", v.State)
	if v.Reason != "" {
		row(w, "Reason:", v.Reason)
	}
	if v.PID > 0 {
		row(w, "PID:", fmt.Sprint(v.PID))
	}
	row(w, "Memory:", fmtMiB(v.MemoryMiB))
	row(w, "Accel:", orDash(v.Accel))
	if v.Snapshot != "" {
		row(w, "Snapshot:", v.Snapshot)
		row(w, "Strategy:", orDash(v.Strategy))
	}
	if v.BootMS > 0 {
		row(w, "Boot:", fmtMS(v.BootMS))
	}
	row(w, "Run dir:", orDash(v.RunDir))
	row(w, "Created:", fmtTime(v.CreatedAt))
	row(w, "Updated:", fmtTime(v.UpdatedAt))
	if err := w.Flush(); err != nil {
		return err
	}
	if v.Restore != nil {
		fmt.Fprintln(a.stdout, "\nRestore:")
		w = newTable(a.stdout)
		writeRestoreTiming(w, "  ", v.Restore)
		row(w, "  ready", fmtMSCol(v.Restore.SetupMS+v.Restore.ResumeMS), "setup + resume")
		return w.Flush()
	}
	return nil
}

// deleteAll deletes every id with del, reporting each failure on stderr and
// going on; it fails (exit code 1) if any delete failed.
func (a *app) deleteAll(kind string, ids []string, del func(ctx context.Context, id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := del(a.ctx, id); err != nil {
			if a.ctx.Err() != nil || len(ids) == 1 {
				return err
			}
			a.printError(err)
			failed++
			continue
		}
		if !a.json {
			fmt.Fprintf(a.stdout, "deleted %s %s\n", kind, id)
		}
	}
	if failed > 0 {
		fmt.Fprintf(a.stderr, "thaw: %d of %d %ss not deleted\n", failed, len(ids), kind)
		return &exitCodeError{code: exitError}
	}
	return nil
}
