package vm

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newVMDeleteCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "delete ID...",
		Aliases: []string{"rm"},
		Short:   "Stop and forget VMs",
		Long: `Stop and forget one or more VMs. All are tried; thaw exits with code 1 if
any of them could not be deleted.

A VM that is busy (serving an invocation, being snapshotted, booting) is
deleted when that ends, and no new invocation starts on it meanwhile; while
it waits, thaw says on stderr what for. --force kills the VM at once: the
invocation running on it fails, its error saying the VM was deleted, and it
is recorded as failed ('thaw invocations').`,
		Example: `  thaw vm delete vm-0123abcd
  thaw vm delete --force vm-0123abcd
  thaw vm delete $(thaw vm list --state failed -q)`,
		Args: cli.MinArgs("VM ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.DeleteAll("vm", args, func(ctx context.Context, id string) error {
				if force {
					return a.forceDeleteVM(ctx, id)
				}
				return a.deleteVMWaiting(ctx, id)
			})
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill the VM at once, failing the invocation it runs, instead of waiting for it")
	return cmd
}

// deleteVMWaiting deletes VM id and, while the daemon waits for what runs
// on it, says what that is.
func (a *app) deleteVMWaiting(ctx context.Context, id string) error {
	done := make(chan error, 1)
	go func() { done <- a.C.DeleteVM(ctx, id) }()
	timer := time.NewTimer(waitNotice)
	defer timer.Stop()
	var n waitNotes
	for {
		select {
		case err := <-done:
			return err
		case <-timer.C:
		}
		if v, err := a.C.GetVM(ctx, id); err == nil {
			n.say(a.Stderr, v)
		}
		timer.Reset(waitPoll)
	}
}

// waitNotes says what a delete waits for when that changes, and again
// every repeatNote.
type waitNotes struct {
	last string
	at   time.Time
}

const repeatNote = 30 * time.Second

func (n *waitNotes) say(w io.Writer, v *client.VM) {
	key := v.State
	msg := fmt.Sprintf("thaw: vm %s: waiting for it to finish what it is doing (it is %s); --force kills the VM now", v.ID, v.State)
	if r := v.Invocation; r != nil {
		key = r.ID
		msg = fmt.Sprintf("thaw: vm %s: waiting for invocation %s (running %s, timeout %s); --force kills the VM now",
			v.ID, r.ID, fmtSeconds(r.RunningMS), fmtSeconds(r.TimeoutMS))
	}
	if key == n.last && time.Since(n.at) < repeatNote {
		return
	}
	n.last, n.at = key, time.Now()
	fmt.Fprintln(w, msg)
}

// fmtSeconds formats milliseconds as seconds: "0.4 s", "12 s".
func fmtSeconds(ms float64) string {
	if ms < 10000 {
		return fmt.Sprintf("%.1f s", ms/1000)
	}
	return fmt.Sprintf("%.0f s", ms/1000)
}

// forceDeleteVM kills and deletes VM id at once, and says which
// invocation that ended.
func (a *app) forceDeleteVM(ctx context.Context, id string) error {
	v, _ := a.C.GetVM(ctx, id) // only to say what the kill ended; the delete reports errors
	if err := a.C.DeleteVMWith(ctx, id, client.DeleteVMOptions{Force: true}); err != nil {
		return err
	}
	if v != nil && v.Invocation != nil {
		fmt.Fprintf(a.Stderr, "thaw: vm %s was killed during invocation %s (running %s), which failed\n",
			id, v.Invocation.ID, fmtSeconds(v.Invocation.RunningMS))
	}
	return nil
}

// How long a VM's delete may take before thaw says what it waits for,
// and how often it looks again (tests shorten them).
var (
	waitNotice = time.Second
	waitPoll   = 2 * time.Second
)
