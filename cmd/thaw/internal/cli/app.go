// Package cli is what thaw's command packages share: a run of thaw (App:
// its streams, global flags, client and request context), the root
// command, exit codes and error reports, argument checks, list and get
// commands, operations started and followed, and the documents printed
// for operations' results. It imports no command package.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/thaw-dev/thaw/client"
)

// App is one run of thaw: its streams, global flags and client.
type App struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer

	URL     string
	Timeout time.Duration
	// Output (print.go): -o, --json, -q as given, and what they resolve
	// to: JSON is true for a document format (JSON or YAML).
	Output   string
	JSONFlag bool
	Quiet    bool
	Format   string
	JSON     bool
	Wide     bool

	C      *client.Client
	Ctx    context.Context // the request context, with --timeout
	Cancel context.CancelFunc
	InRun  bool // a command's RunE started: later errors are not usage errors
	// details are the daemon's strategy descriptions by kind, read once
	// when a strategy's stats are printed (strategystats.go).
	details map[string]*client.StrategyDetails
}

// WrapRunE makes every command's RunE check the global flags, open the
// client and set the request context first, and marks that the command
// started, so that Execute tells usage errors from failures.
func (a *App) WrapRunE(cmd *cobra.Command) {
	if run := cmd.RunE; run != nil && cmd.Annotations[groupAnnotation] == "" {
		cmd.RunE = func(cmd *cobra.Command, args []string) error {
			a.InRun = true
			if err := a.setup(cmd.Context()); err != nil {
				return err
			}
			return run(cmd, args)
		}
	}
	for _, sub := range cmd.Commands() {
		a.WrapRunE(sub)
	}
}

func (a *App) setup(ctx context.Context) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if !strings.HasPrefix(a.URL, "http://") && !strings.HasPrefix(a.URL, "https://") && !strings.HasPrefix(a.URL, "unix:") {
		return Usagef("--url %q: want http://host:port, https://host:port or unix:/path/to/socket", a.URL)
	}
	if a.URL == "unix:" {
		return Usagef("--url unix: needs the socket's path, as in %s", client.DefaultURL)
	}
	if a.Timeout <= 0 {
		return Usagef("--timeout must be positive, got %s", a.Timeout)
	}
	if err := a.ResolveOutput(); err != nil {
		return err
	}
	c, err := client.NewFromEnv(a.URL)
	if err != nil {
		return err
	}
	a.C = c
	a.Ctx, a.Cancel = context.WithTimeout(ctx, a.Timeout)
	return nil
}

const groupAnnotation = "thaw-group"

// NewGroupCmd returns a command that only holds subcommands: alone it prints
// its help, with an unknown subcommand it is a usage error.
func NewGroupCmd(use, short, long string, aliases ...string) *cobra.Command {
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
				return Usagef("%s", msg)
			}
			return cmd.Help()
		},
	}
}

// ExactArgs is cobra.ExactArgs with a message that names the arguments.
func ExactArgs(names ...string) cobra.PositionalArgs {
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

// RangeArgs takes min to max arguments, named by usage in the message.
func RangeArgs(min, max int, usage string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < min || len(args) > max {
			return fmt.Errorf("%s takes %d to %d arguments (%s), got %d", cmd.CommandPath(), min, max, usage, len(args))
		}
		return nil
	}
}

// MinArgs is cobra.MinimumNArgs with a message that names the argument.
func MinArgs(name string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return fmt.Errorf("%s needs at least one %s", cmd.CommandPath(), name)
		}
		return nil
	}
}

// NewRoot returns a root command of a: it writes to a's streams, takes the
// global flags (--url, -o, --json, -q, --timeout) into a, and reports bad
// flags as usage errors. Add the commands, then WrapRunE it.
func NewRoot(a *App, use, short, long string) *cobra.Command {
	defURL := os.Getenv("THAW_URL")
	if defURL == "" {
		defURL = client.DefaultURL
	}
	root := &cobra.Command{
		Use:           use,
		Short:         short,
		Long:          long,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return Usagef("%s", err.Error())
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.URL, "url", defURL, "thawd's address: unix:/path/to/socket, or http(s)://host:port with a token (env THAW_URL; token from THAW_TOKEN or THAW_TOKEN_FILE)")
	pf.StringVarP(&a.Output, "output", "o", "", "output format: table (the default), wide (every column), json or yaml (the daemon's documents)")
	pf.BoolVar(&a.JSONFlag, "json", false, "print the daemon's JSON documents instead of tables (-o json)")
	pf.BoolVarP(&a.Quiet, "quiet", "q", false, "print only ids, one a line (lists, and commands that create or start something); invoke: only the result")
	pf.DurationVar(&a.Timeout, "timeout", 10*time.Minute, "overall timeout of the request to thawd")
	return root
}
