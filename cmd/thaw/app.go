package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
)

// app is one run of thaw: its streams, global flags and client.
type app struct {
	stdin          io.Reader
	stdout, stderr io.Writer

	url     string
	timeout time.Duration
	// Output (format.go): -o, --json, -q as given, and what they resolve
	// to: json is true for a document format (JSON or YAML).
	output   string
	jsonFlag bool
	quiet    bool
	format   string
	json     bool
	wide     bool

	c      *client.Client
	ctx    context.Context // the request context, with --timeout
	cancel context.CancelFunc
	inRun  bool // a command's RunE started: later errors are not usage errors
	// details are the daemon's strategy descriptions by kind, read once
	// when a strategy's stats are printed (strategystats.go).
	details map[string]*client.StrategyDetails
}

// wrapRunE makes every command's RunE check the global flags, open the
// client and set the request context first, and marks that the command
// started, so that main tells usage errors from failures.
func (a *app) wrapRunE(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil && cmd.Annotations[groupAnnotation] == "" {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			a.inRun = true
			if err := a.setup(cmd.Context()); err != nil {
				return err
			}
			return run(cmd, args)
		}
	}
	for _, sub := range cmd.Commands() {
		a.wrapRunE(sub)
	}
}

func (a *app) setup(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if !strings.HasPrefix(a.url, "http://") && !strings.HasPrefix(a.url, "https://") && !strings.HasPrefix(a.url, "unix:") {
		return usagef("--url %q: want http://host:port, https://host:port or unix:/path/to/socket", a.url)
	}
	if a.url == "unix:" {
		return usagef("--url unix: needs the socket's path, as in %s", client.DefaultURL)
	}
	if a.timeout <= 0 {
		return usagef("--timeout must be positive, got %s", a.timeout)
	}
	if err := a.resolveOutput(); err != nil {
		return err
	}
	c, err := client.NewFromEnv(a.url)
	if err != nil {
		return err
	}
	a.c = c
	a.ctx, a.cancel = context.WithTimeout(ctx, a.timeout)
	return nil
}

const groupAnnotation = "thaw-group"

// newGroupCmd returns a command that only holds subcommands: alone it prints
// its help, with an unknown subcommand it is a usage error.
func newGroupCmd(use, short, long string, aliases ...string) *cobra.Command {
	return &cobra.Command{
		Use:         use,
		Aliases:     aliases,
		Short:       short,
		Long:        long,
		Annotations: map[string]string{groupAnnotation: "true"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
				if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
					msg += fmt.Sprintf("; did you mean %q?", s[0])
				}
				return usagef("%s", msg)
			}
			return cmd.Help()
		},
	}
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(names ...string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(names) == 0 && len(args) > 0 {
			return fmt.Errorf("%s takes no arguments, got %q", cmd.CommandPath(), args)
		}
		if len(args) != len(names) {
			return fmt.Errorf("%s takes %d argument(s) (%s), got %d", cmd.CommandPath(), len(names), strings.Join(names, " "), len(args))
		}
		return nil
	}
}

// rangeArgs takes min to max arguments, named by usage in the message.
func rangeArgs(min, max int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return fmt.Errorf("%s takes %d to %d arguments (%s), got %d", cmd.CommandPath(), min, max, usage, len(args))
		}
		return nil
	}
}

// minArgs is cobra.MinimumNArgs with a message that names the argument.
func minArgs(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%s needs at least one %s", cmd.CommandPath(), name)
		}
		return nil
	}
}
