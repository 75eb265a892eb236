package logs

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

// followWait is how long each request of thaw logs --follow waits on the
// daemon for new lines (it answers as soon as there are).
const followWait = 25 * time.Second

// logsFlags are thaw logs' flags.
type logsFlags struct {
	follow     bool
	since      string
	invocation string
}

func (a *app) newLogsCmd() *cobra.Command {
	f := &logsFlags{}
	cmd := &cobra.Command{
		Use:   "logs FUNCTION",
		Short: "Print what a function's invocations wrote to stdout and stderr",
		Long: `Print a function's logs, oldest first: what its invocations wrote to
stdout and stderr (print(), C code, the processes they started), in the
order written, and the guest kernel's messages (kernel: ...), one line
each after the time the invocation ended and its id. The daemon keeps
them with the invocation history, so they outlive the VM; an invocation
that timed out or whose VM failed has none. An invocation's output is
kept up to thawd --max-logs (256 KiB): beyond it its first and last
parts, with a line saying how much was cut.

--follow prints new lines as invocations end, until interrupted (Ctrl-C
ends it with exit code 0). --since takes a duration before now (10m, 2h)
or a time (2026-11-27T10:00:00Z, or 2026-11-27 10:00 in local time).

Guest text is shown escaped (control characters as \x1b). -o wide adds
each line's trace id (the trace of the request that invoked, when the
daemon traces); -q prints the lines' text alone; -o json or yaml prints
the daemon's documents ({"items": [...]}; with --follow one document per
line as they come).`,
		Example: `  thaw logs hello
  thaw logs hello --since 10m
  thaw logs hello --follow
  thaw logs hello --invocation inv-3f9a0c1d2e4b
  thaw invoke hello --logs          # the invocation's logs on stderr as it answers
  thaw -o json logs hello | jq -r '.items[].text'`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error { return a.logs(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	fl.BoolVarP(&f.follow, "follow", "f", false, "print new lines as they come, until interrupted")
	fl.StringVar(&f.since, "since", "", "only invocations that ended since: a duration before now (10m, 2h) or a time")
	fl.StringVar(&f.invocation, "invocation", "", "only this invocation's lines")
	return cmd
}

// logs runs thaw logs FUNCTION.
func (a *app) logs(cmd *cobra.Command, function string, f *logsFlags) error {
	q := client.LogsQuery{Invocation: f.invocation}
	if f.since != "" {
		since, err := parseSince(f.since, time.Now())
		if err != nil {
			return err
		}
		q.Since = since
	}
	if f.follow && f.invocation != "" {
		return cli.Usagef("--follow and --invocation do not go together: an invocation's logs are whole when it ends")
	}
	if !f.follow {
		return a.printLogPages(q, function)
	}
	return a.followLogs(cmd.Context(), function, q)
}

// printLogPages prints every page of lines there is now.
func (a *app) printLogPages(q client.LogsQuery, function string) error {
	var all []client.LogLine
	for {
		page, err := a.C.FunctionLogs(a.Ctx, function, q)
		if err != nil {
			return err
		}
		if a.JSON {
			all = append(all, page.Items...)
		} else {
			a.printLogLines(page.Items)
		}
		if !page.More {
			break
		}
		q.After = page.Next
	}
	if a.JSON {
		return cli.PrintList(a.App, all)
	}
	return nil
}

// followLogs prints the lines there are, then new ones as they come, each
// request waiting on the daemon for them, until ctx ends (an interrupt):
// then it returns nil.
func (a *app) followLogs(ctx context.Context, function string, q client.LogsQuery) error {
	for {
		rctx, cancel := context.WithTimeout(ctx, a.Timeout+q.Wait)
		page, err := a.C.FunctionLogs(rctx, function, q)
		cancel()
		if ctx.Err() != nil {
			return nil // interrupted: the normal end of --follow
		}
		if err != nil {
			return err
		}
		if a.JSON {
			for _, l := range page.Items {
				if err := a.printLogDocument(l); err != nil {
					return err
				}
			}
		} else {
			a.printLogLines(page.Items)
		}
		q.After = page.Next
		q.Wait = followWait
		if page.More {
			q.Wait = 0
		}
	}
}

// printLogLines prints lines as text: the time, the invocation (and with
// -o wide the trace id), then the line escaped; -q: the line alone.
func (a *app) printLogLines(lines []client.LogLine) {
	for _, l := range lines {
		// One line each: a newline the text should not have is shown as \n.
		text := strings.ReplaceAll(termtext.Escape(l.Text), "\n", `\n`)
		if l.Stream == client.StreamKernel {
			text = "kernel: " + text
		}
		switch {
		case a.Quiet:
			fmt.Fprintln(a.Stdout, text)
		case a.Wide:
			fmt.Fprintf(a.Stdout, "%s %s %s %s\n", fmtLogTime(l.Time), termtext.Line(l.Invocation), output.OrDash(termtext.Line(l.TraceID)), text)
		default:
			fmt.Fprintf(a.Stdout, "%s %s %s\n", fmtLogTime(l.Time), termtext.Line(l.Invocation), text)
		}
	}
}

// printLogDocument prints one line as a document of its own: compact JSON
// on one line (JSON Lines), or a YAML document.
func (a *app) printLogDocument(l client.LogLine) error {
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	if a.Format == cli.FormatYAML {
		y, err := output.JSONToYAML(b)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.Stdout, "---\n%s", y)
		return err
	}
	_, err = fmt.Fprintf(a.Stdout, "%s\n", termtext.JSON(b))
	return err
}

func fmtLogTime(t time.Time) string { return t.Local().Format("2006-01-02T15:04:05.000Z07:00") }

// parseSince reads --since: a duration before now, or a time (RFC 3339,
// or a date and time of day in local time).
func parseSince(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		if d < 0 {
			return time.Time{}, cli.Usagef("--since %q: a duration before now is positive (10m)", s)
		}
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02T15:04:05", "2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.ParseInLocation(layout, s, time.Local); err == nil {
			return t, nil
		}
	}
	return time.Time{}, cli.Usagef("--since %q: want a duration before now (10m, 2h) or a time (2026-11-27T10:00:00Z, 2026-11-27 10:00)", s)
}
