package async

import (
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newAsyncCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("async", "Asynchronous invocations: settings and states",
		`'thaw invoke --async' queues an invocation durably and prints its id. It
runs with the function's retries (exponential backoff with jitter), up to
its maximum event age, and its outcome goes to the function's
destinations: the dead-letter subject ('thaw dlq') or a webhook.`)
	var (
		retries, concurrency int
		maxAge, backoff      time.Duration
		req                  client.AsyncConfigRequest
	)
	set := &cobra.Command{
		Use:   "set FUNCTION",
		Short: "Set a function's retries, event age, backoff, concurrency and destinations",
		Long: `Set a function's asynchronous settings, as a whole: a flag left out is
the daemon's default. A destination is dlq (the dead-letter subject) or an
http(s) URL (a webhook the daemon's --destination-allow or
--allow-public-destinations allows); failures go to dlq by default.`,
		Example: `  thaw async set resize --retries 3 --backoff 2s --max-age 1h
  thaw async set resize --on-success http://127.0.0.1:9000/done --on-failure dlq`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("retries") {
				req.MaxRetries = &retries
			}
			if maxAge < 0 || backoff < 0 || concurrency < 0 {
				return cli.Usagef("--max-age, --backoff and --concurrency must not be negative")
			}
			req.MaxEventAgeS, req.BackoffMS, req.Concurrency = int64(maxAge/time.Second), backoff.Milliseconds(), concurrency
			c, err := a.C.SetAsyncConfig(a.Ctx, args[0], req)
			if err != nil {
				return err
			}
			return a.printAsyncConfig(c)
		},
	}
	fl := set.Flags()
	fl.IntVar(&retries, "retries", 2, "retries after the first attempt")
	fl.DurationVar(&maxAge, "max-age", 0, "how long an event is tried (default: the daemon's, 6h)")
	fl.DurationVar(&backoff, "backoff", 0, "delay before the first retry, doubled for each next (default: the daemon's, 1s)")
	fl.IntVar(&concurrency, "concurrency", 0, "the function's asynchronous invocations at once, across nodes (default: the daemon's, 2)")
	fl.StringVar(&req.OnSuccess, "on-success", "", "where successes' outcomes go: dlq or a webhook URL (default: nowhere)")
	fl.StringVar(&req.OnFailure, "on-failure", "", "where failures' outcomes go: dlq (default) or a webhook URL")
	get := cli.NewGetCmd("function's asynchronous settings", "FUNCTION", cli.OneRunE(a.App, (*client.Client).GetAsyncConfig, a.printAsyncConfig))
	reset := &cobra.Command{Use: "reset FUNCTION", Short: "Return a function to the daemon's asynchronous defaults", Args: cli.ExactArgs("FUNCTION"),
		RunE: func(_ *cobra.Command, args []string) error {
			if err := a.C.ResetAsyncConfig(a.Ctx, args[0]); err != nil {
				return err
			}
			return a.PrintOr(struct{}{}, "reset %s\n", termtext.Line(args[0]))
		}}
	status := &cobra.Command{Use: "status ID", Short: "Show an asynchronous invocation's state", Args: cli.ExactArgs("ID"),
		RunE: cli.OneRunE(a.App, (*client.Client).GetAsync, a.printAsyncState)}
	cmd.AddCommand(set, get, reset, status)
	return cmd
}

func (a *app) printAsyncConfig(c *client.AsyncConfig) error {
	return a.PrintObject(c, "async settings of", termtext.Line(c.Function), func(w io.Writer) {
		if c.MaxRetries != nil {
			output.Row(w, "retries", strconv.Itoa(*c.MaxRetries))
		}
		output.Row(w, "max event age", (time.Duration(c.MaxEventAgeS) * time.Second).String())
		output.Row(w, "backoff", (time.Duration(c.BackoffMS) * time.Millisecond).String())
		output.Row(w, "concurrency", strconv.Itoa(c.Concurrency))
		output.Row(w, "on success", output.OrDash(c.OnSuccess))
		output.Row(w, "on failure", output.OrDash(c.OnFailure))
	})
}

func (a *app) printAsyncState(s *client.AsyncInvocation) error {
	return a.PrintObject(s, "async invocation", termtext.Line(s.ID), func(w io.Writer) {
		output.Row(w, "function", s.Function)
		output.Row(w, "state", s.State)
		output.Row(w, "attempts", strconv.Itoa(s.Attempts))
		if len(s.Invocations) > 0 {
			output.Row(w, "invocations", strings.Join(s.Invocations, " "))
		}
		if s.Schedule != "" {
			output.Row(w, "schedule", s.Schedule)
		}
		if s.Error != "" {
			output.Row(w, "error", s.Error)
		}
		output.Row(w, "queued", output.FmtTime(s.EnqueuedAt))
		output.Row(w, "updated", output.FmtTime(s.UpdatedAt))
	})
}
