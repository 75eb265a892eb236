package function

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newFunctionRestoreCmd() *cobra.Command {
	f := &cli.RestoreFlags{}
	cmd := &cobra.Command{
		Use:   "restore NAME [--strategy auto|STRATEGY|default] [--refresh prepare|traffic|off|default]",
		Short: "Show or set how a function's cold starts restore",
		Long: `Show how a function's cold starts restore, or set it.

Under --strategy auto thaw chooses the restore strategy of every cold start
that names none, per version of the function and per location of its
snapshot (local, or lazily from the registry), from the cold starts it has
served: the strategy with the lowest recent median total, exploring the
others in at most a tenth of the cold starts (never while VM starts wait for
room). A version whose snapshot has no artifacts is prepared in the
background. The document shows the current choice, its evidence (samples
and medians per strategy) and when it last changed.

After each reap, faasnap or snapbpf restore thaw compares what the guest
touched with the set the strategy recorded. When 5 of the last 10 cold
starts touched more than 20% of their pages outside it, the set is recorded
again in the background and swapped in whole: --refresh prepare records
with the input of the prepare that made it, --refresh traffic (or
--refresh-from-traffic) with the invocation that showed the drift, used once
and never stored; --refresh off never. "default" returns a setting to the
daemon's (thawd --default-strategy, --default-refresh).

An invocation's --strategy still wins, and so does a function's fixed
strategy over the daemon's default.`,
		Example: `  thaw function restore hello
  thaw function restore hello --strategy auto --refresh-from-traffic
  thaw function restore hello --strategy reap --refresh off
  thaw function restore hello --strategy default`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := f.Settings()
			if err != nil {
				return err
			}
			var doc *client.FunctionRestore
			if s.Strategy == nil && s.Refresh == nil {
				doc, err = a.C.FunctionRestore(a.Ctx, args[0])
			} else {
				doc, err = a.C.SetFunctionRestore(a.Ctx, args[0], s)
			}
			if err != nil {
				return err
			}
			if a.JSON {
				return a.PrintJSON(doc)
			}
			return a.printRestore(doc)
		},
	}
	f.Add(cmd.Flags())
	return cmd
}

// printRestore prints a function's restore document as thaw function get
// and thaw function restore show it.
func (a *app) printRestore(doc *client.FunctionRestore) error {
	if doc == nil || a.Quiet {
		return nil
	}
	w := output.NewTable(a.Stdout)
	output.Row(w, "Strategy:", fmt.Sprintf("%s (%s)", doc.Strategy, settingFrom(doc.StrategyFrom)))
	output.Row(w, "Refresh:", fmt.Sprintf("%s (%s)", doc.Refresh, settingFrom(doc.RefreshFrom)))
	for _, v := range doc.Versions {
		printRestoreVersion(w, v)
	}
	return w.Flush()
}

func settingFrom(from string) string {
	if from == "function" {
		return "the function's"
	}
	return "the daemon's default"
}

func printRestoreVersion(w io.Writer, v client.RestoreVersion) {
	name := "unversioned"
	if v.Version > 0 {
		name = fmt.Sprintf("version %d", v.Version)
	}
	for _, l := range v.Locations {
		output.Row(w, fmt.Sprintf("Restore, %s, %s:", name, l.Location),
			fmt.Sprintf("%s since %s, %d cold starts, %d explored; %s", output.OrDash(l.Choice), output.FmtAge(l.ChangedAt), l.ColdStarts, l.Explorations, l.Reason))
		for _, e := range l.Evidence {
			output.Row(w, "", fmt.Sprintf("  %-8s %2d samples: total %s, set-up %s, resume %s, %.0f faults, %s read", e.Strategy, e.Samples,
				output.FmtMS(e.MedianTotalMS), output.FmtMS(e.MedianSetupMS), output.FmtMS(e.MedianResumeMS), e.MedianFaults, output.FmtBytes(int64(e.MedianBytesRead))))
		}
	}
	for _, d := range v.Drift {
		text := fmt.Sprintf("%s: %d of the last %d cold starts over 20%% outside the set (last %.0f%%)", d.Strategy, d.Drifted, d.ColdStarts, d.LastOutsideRatio*100)
		if d.Held != "" {
			text += "; held: " + d.Held
		}
		output.Row(w, "Drift, "+name+":", text)
	}
	for _, r := range v.Refreshes {
		text := fmt.Sprintf("%s %s (%s, %s input): %s", r.Operation, r.State, output.FmtAge(r.StartedAt), r.Source, r.Reason)
		for _, s := range r.Sets {
			text += fmt.Sprintf("; %s %d -> %d pages", s.Strategy, s.PagesBefore, s.PagesAfter)
		}
		if r.Error != "" {
			text += "; " + r.Error
		}
		output.Row(w, "Refresh, "+name+":", text)
	}
	if p := v.Prepare; p != nil {
		text := fmt.Sprintf("%s %s (%s): %s", p.Operation, p.State, output.FmtAge(p.StartedAt), p.Reason)
		if p.Snapshot != "" {
			text += "; made " + p.Snapshot
		}
		if p.Error != "" {
			text += "; " + p.Error
		}
		output.Row(w, "Background prepare, "+name+":", text)
	}
}

func (a *app) newFunctionRefreshCmd() *cobra.Command {
	var (
		ev         cli.EventFlags
		strategies []string
		detach     bool
	)
	cmd := &cobra.Command{
		Use:   "refresh FUNCTION",
		Short: "Record a function's working sets again now",
		Long: `Record the working sets (REAP's, FaaSnap's loading set, SnapBPF's prefetch
set) of the newest snapshot of FUNCTION (NAME, NAME:VERSION or NAME:ALIAS)
again, with --event (used once, never stored) or, without it, the input its
prepare recorded with, and swap each in whole: what thaw does by itself when
the cold starts drift from a set (thaw function restore --help). Cold starts
under way keep the sets they began with. It runs as an operation; --detach
leaves it running.`,
		Example: `  thaw function refresh image --event '{"size":1024}'
  thaw function refresh image --strategies reap`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			event, err := ev.Read(a.App, cmd)
			if err != nil {
				return err
			}
			return a.RunOperation(detach, func() (*client.Operation, error) {
				return a.C.StartRefreshWorkingSets(a.Ctx, args[0], event, strategies...)
			})
		},
	}
	cli.AddDetach(cmd, &detach)
	ev.Add(cmd, "the record input (default: the prepare's)")
	cmd.Flags().StringSliceVar(&strategies, "strategies", nil, "only these strategies' sets (default: every one the snapshot has)")
	return cmd
}
