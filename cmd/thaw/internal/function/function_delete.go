package function

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newFunctionDeleteCmd() *cobra.Command {
	var cascade, yes bool
	cmd := &cobra.Command{
		Use:     "delete NAME",
		Aliases: []string{"rm"},
		Short:   "Delete a function (--cascade: with its VMs, snapshots and versions)",
		Long: `Delete a function and its code. A function that anything uses (a VM, also
one kept idle by keep-alive or standby in the VMM pool, a snapshot, a
version) is refused, and the error lists everything that uses it.

--cascade deletes all of that with it in one step: its VMs are stopped (one
running an invocation is killed, and the invocation fails), its snapshots
are deleted (pinned ones too, with their copies in the memory store), then
its versions, aliases and code; thaw prints what went. On a terminal thaw
asks first; --yes skips the question, and without a terminal --cascade
needs it. The snapshot registry keeps what was pushed to it, and the
invocation history ('thaw invocations') keeps the function's records.`,
		Example: `  thaw function delete hello
  thaw function delete hello --cascade
  thaw function delete hello --cascade --yes`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if cascade && !yes {
				if !isTerminal(a.Stdin) {
					return cli.Usagef("--cascade deletes function %s with all its VMs, snapshots and versions: confirm with --yes (stdin is not a terminal to ask on)", name)
				}
				ok, err := a.confirmCascade(name)
				if err != nil {
					return err
				}
				if !ok {
					fmt.Fprintf(a.Stderr, "thaw: function %s not deleted\n", name)
					return &cli.ExitCodeError{Code: cli.ExitError}
				}
			}
			res, err := a.C.DeleteFunctionWith(a.Ctx, name, client.DeleteFunctionOptions{Cascade: cascade})
			if err != nil {
				return err
			}
			return a.printDeletion(res)
		},
	}
	cmd.Flags().BoolVar(&cascade, "cascade", false, "also delete the function's VMs (stopping running ones), snapshots, versions and aliases")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask before --cascade deletes (needed without a terminal)")
	return cmd
}

// isTerminal says whether r is a terminal, the only place thaw asks
// before a cascade (a variable: tests pretend).
var isTerminal = stdinTerminal

func stdinTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// confirmCascade says on stderr what a cascade would delete and asks;
// true if the answer is yes.
func (a *app) confirmCascade(name string) (bool, error) {
	if _, err := a.C.GetFunction(a.Ctx, name); err != nil {
		return false, err
	}
	vms, err := a.C.ListVMs(a.Ctx)
	if err != nil {
		return false, err
	}
	snaps, err := a.C.ListSnapshots(a.Ctx, name)
	if err != nil {
		return false, err
	}
	vs, err := a.C.ListVersions(a.Ctx, name)
	if err != nil {
		return false, err
	}
	aliases, err := a.C.ListAliases(a.Ctx, name)
	if err != nil {
		return false, err
	}
	var lines, items []string
	for _, v := range vms {
		if v.Function == name {
			items = append(items, v.ID+" ("+output.VMState(&v)+")")
		}
	}
	if len(items) > 0 {
		lines = append(lines, counted(len(items), "VM", "VMs")+": "+strings.Join(items, ", ")+
			"; running ones are stopped, and invocations on them fail")
	}
	items = nil
	for _, sn := range snaps {
		if sn.Pinned {
			items = append(items, sn.ID+" (pinned)")
		} else {
			items = append(items, sn.ID)
		}
	}
	if len(items) > 0 {
		lines = append(lines, counted(len(items), "snapshot", "snapshots")+": "+strings.Join(items, ", "))
	}
	items = nil
	for _, v := range vs {
		items = append(items, strconv.Itoa(v.Version))
	}
	if len(items) > 0 {
		line := counted(len(items), "version", "versions") + ": " + strings.Join(items, ", ")
		if len(aliases) > 0 {
			line += " and " + counted(len(aliases), "alias", "aliases")
		}
		lines = append(lines, line)
	}
	if len(lines) == 0 {
		fmt.Fprintf(a.Stderr, "Delete function %s (nothing else uses it)? [y/N] ", name)
	} else {
		fmt.Fprintf(a.Stderr, "Function %s has\n  %s\nDelete it with all of that? [y/N] ", name, strings.Join(lines, "\n  "))
	}
	answer, _ := bufio.NewReader(a.Stdin).ReadString('\n')
	answer = strings.ToLower(strings.TrimSpace(answer))
	return answer == "y" || answer == "yes", nil
}

// counted is "1 VM" or "3 VMs".
func counted(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// printDeletion prints what a function's delete removed.
func (a *app) printDeletion(d *client.FunctionDeletion) error {
	return a.PrintObject(d, "deleted function", d.Function, func(w io.Writer) {
		if len(d.VMs) > 0 {
			var items []string
			for _, v := range d.VMs {
				note := v.State
				switch {
				case v.Invocation != "":
					note += ", killed during invocation " + v.Invocation
				case v.Kept:
					note = "kept idle"
				}
				items = append(items, v.ID+" ("+note+")")
			}
			output.Row(w, "VMs:", fmt.Sprintf("%d: %s", len(d.VMs), strings.Join(items, ", ")))
		}
		if len(d.Snapshots) > 0 {
			var items []string
			for _, sn := range d.Snapshots {
				var notes []string
				if sn.Version > 0 {
					notes = append(notes, "version "+strconv.Itoa(sn.Version))
				}
				if sn.Pinned {
					notes = append(notes, "pinned")
				}
				if sn.Stored {
					notes = append(notes, "with its memory store copy")
				}
				if len(notes) == 0 {
					items = append(items, sn.ID)
					continue
				}
				items = append(items, sn.ID+" ("+strings.Join(notes, ", ")+")")
			}
			output.Row(w, "Snapshots:", fmt.Sprintf("%d: %s", len(d.Snapshots), strings.Join(items, ", ")))
		}
		if len(d.Versions) > 0 {
			var items []string
			for _, v := range d.Versions {
				items = append(items, strconv.Itoa(v))
			}
			output.Row(w, "Versions:", fmt.Sprintf("%d: %s", len(d.Versions), strings.Join(items, ", ")))
		}
		if len(d.Aliases) > 0 {
			output.Row(w, "Aliases:", fmt.Sprintf("%d: %s", len(d.Aliases), strings.Join(d.Aliases, ", ")))
		}
		output.Row(w, "Code:", counted(d.CodeDirs, "copy removed", "copies removed"))
	})
}
