package schedule

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newScheduleCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("schedule", "Invoke functions on cron schedules",
		`A schedule invokes a function asynchronously on a cron schedule (each
firing has the function's retries and destinations: 'thaw async set').
One node of a cluster fires it, each tick at most once. Ticks missed while
no node ran it, or while it was paused, are skipped (--missed skip) or
fired once (--missed once).`, "schedules")
	var (
		req client.CreateScheduleRequest
		ev  cli.EventFlags
	)
	create := &cobra.Command{
		Use:   "create FUNCTION[:ALIAS|:VERSION] --cron SPEC",
		Short: "Create a schedule",
		Long: `Create a schedule. --cron takes five fields (minute hour day-of-month
month weekday), six with seconds first, or a descriptor (@hourly,
@every 30s); --tz an IANA time zone (default UTC). Each firing's event is
--event, else {"schedule": NAME, "time": TICK}.`,
		Example: `  thaw schedule create report --cron "*/5 * * * *" --event '{"kind": "daily"}'
  thaw schedule create report:live --name office-hours --cron "0 9 * * 1-5" --tz Europe/Zurich
  thaw schedule create ping --cron "@every 10s"`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.Function = args[0]
			if req.Name == "" {
				req.Name = strings.ReplaceAll(args[0], ":", "-")
			}
			if cmd.Flags().Changed("event") || cmd.Flags().Changed("event-file") {
				e, err := ev.Read(a.App, cmd)
				if err != nil {
					return err
				}
				req.Event = e
			}
			s, err := a.C.CreateSchedule(a.Ctx, req)
			if err != nil {
				return err
			}
			return a.printSchedule(s)
		},
	}
	fl := create.Flags()
	fl.StringVar(&req.Name, "name", "", "the schedule's name (default: the function reference, ':' as '-')")
	fl.StringVar(&req.Cron, "cron", "", "when it fires (required)")
	fl.StringVar(&req.TimeZone, "tz", "", "IANA time zone of --cron (default UTC)")
	fl.StringVar(&req.Missed, "missed", "skip", "ticks missed while no node ran it: skip, or once (fire once for them)")
	fl.BoolVar(&req.Paused, "paused", false, "create it paused ('thaw schedule resume' starts it)")
	ev.Add(create, "each firing's event")
	_ = create.MarkFlagRequired("cron")
	_ = create.RegisterFlagCompletionFunc("missed", cobra.FixedCompletions([]string{"skip", "once"}, cobra.ShellCompDirectiveNoFileComp))
	list := cli.NewListCmd("schedules", cli.ListRunE(a.App, (*client.Client).ListSchedules, []string{"NAME", "FUNCTION", "CRON", "TZ", "STATE", "LAST", "NEXT"},
		func(s *client.Schedule) []string {
			state := "active"
			if s.Paused {
				state = "paused"
			}
			return []string{s.Name, s.Function, s.Cron, output.OrDash(s.TimeZone), state, output.FmtAge(s.LastAt), output.FmtTime(s.NextAt)}
		}))
	get := cli.NewGetCmd("schedule", "NAME", cli.OneRunE(a.App, (*client.Client).GetSchedule, a.printSchedule))
	pause := &cobra.Command{Use: "pause NAME", Short: "Stop a schedule's firings", Args: cli.ExactArgs("NAME"),
		RunE: cli.OneRunE(a.App, func(c *client.Client, ctx context.Context, n string) (*client.Schedule, error) {
			return c.PauseSchedule(ctx, n, true)
		}, a.printSchedule)}
	resume := &cobra.Command{Use: "resume NAME", Short: "Start a paused schedule's firings again", Args: cli.ExactArgs("NAME"),
		RunE: cli.OneRunE(a.App, func(c *client.Client, ctx context.Context, n string) (*client.Schedule, error) {
			return c.PauseSchedule(ctx, n, false)
		}, a.printSchedule)}
	del := &cobra.Command{Use: "delete NAME...", Aliases: []string{"rm"}, Short: "Delete schedules", Args: cli.MinArgs("schedule name"),
		RunE: func(_ *cobra.Command, args []string) error { return a.DeleteAll("schedule", args, a.C.DeleteSchedule) }}
	cmd.AddCommand(create, list, get, pause, resume, del)
	return cmd
}

func (a *app) printSchedule(s *client.Schedule) error {
	return a.PrintObject(s, "schedule", termtext.Line(s.Name), func(w io.Writer) {
		output.Row(w, "function", s.Function)
		output.Row(w, "cron", s.Cron)
		output.Row(w, "time zone", output.OrDash(s.TimeZone))
		output.Row(w, "missed", s.Missed)
		if s.Paused {
			output.Row(w, "state", "paused")
		} else {
			output.Row(w, "state", "active")
			output.Row(w, "next", output.FmtTime(s.NextAt))
		}
		output.Row(w, "last", output.FmtTime(s.LastAt))
		if len(s.Event) > 0 {
			var b bytes.Buffer
			if json.Compact(&b, s.Event) != nil {
				b.Reset()
				b.Write(s.Event)
			}
			output.Row(w, "event", b.String())
		}
		output.Row(w, "created", output.FmtTime(s.CreatedAt))
	})
}
