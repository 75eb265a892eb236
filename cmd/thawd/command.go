package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/thaw-dev/thaw/internal/buildinfo"
)

// Exit codes.
const (
	exitOK     = 0
	exitFailed = 1 // the daemon failed, or the configuration is invalid
	exitUsage  = 2 // unknown flag or command, bad arguments
)

const rootLong = `thawd runs functions in microVMs, snapshots them and restores them, behind a
REST API on a Unix socket (default ` + defaultSocket + `) and, with the API token, on
TCP. It must run as root.

Every setting below is a flag, an environment variable THAWD_<NAME> (upper
case, '_' for '-': THAWD_DATA_DIR, THAWD_KEEP_ALIVE; repeatable settings take
a comma-separated list) and a key of the YAML config file (data-dir:
/var/lib/thaw, listen: [...], keep-alive: 60s). A flag wins over the
environment, which wins over the file, which wins over the defaults. The file
is --config, else $THAWD_CONFIG, else ` + defaultConfigFile + ` if it exists; a key
it does not know is an error.

At start thawd checks the whole configuration and lists every problem before
it opens anything. 'thawd config check' does only that and prints the settings
in force, each with where it came from; 'thawd config default' prints a
config file with every setting at its default. 'thawd registry key' prints
the node's registry signing key, for other nodes' --registry-trusted-keys.`

// command is one run of thawd: its settings and its streams.
type command struct {
	s              *settings
	configPath     string
	defaultConfig  string // read if it exists and no file is named
	checkOnly      bool
	stdout, stderr io.Writer
	env            func(string) (string, bool)
	// serve runs the daemon; tests replace it.
	serve func(ctx context.Context, cfg serveConfig, log *slog.Logger) error
}

// newCommand is a run of thawd writing to stdout and stderr, reading the
// environment through env (os.LookupEnv).
func newCommand(stdout, stderr io.Writer, env func(string) (string, bool)) *command {
	return &command{s: newSettings(), stdout: stdout, stderr: stderr, env: env, defaultConfig: defaultConfigFile,
		serve: func(ctx context.Context, cfg serveConfig, log *slog.Logger) error { return serve(ctx, cfg, log, nil) }}
}

// execute runs thawd with args (without the program name) and returns the
// exit code.
func (c *command) execute(ctx context.Context, args []string) int {
	root := c.rootCmd()
	root.SetArgs(singleDashLongFlags(root, args))
	err := root.ExecuteContext(ctx)
	var ee *exitError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		return ee.code
	}
	fmt.Fprintf(c.stderr, "thawd: %v\nRun 'thawd --help' for usage.\n", err)
	return exitUsage
}

// exitError ends thawd with code after the problem was reported.
type exitError struct{ code int }

func (e *exitError) Error() string { return fmt.Sprintf("exit code %d", e.code) }

func (c *command) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "thawd",
		Short:         "thaw's daemon: functions in microVMs, restored from memory snapshots",
		Long:          rootLong,
		Version:       buildinfo.String(),
		Args:          cobra.NoArgs,
		SilenceErrors: true,
		SilenceUsage:  true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if c.checkOnly {
				return c.check()
			}
			return c.run(cmd.Context())
		},
	}
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("thawd {{.Version}}\n")
	pf := root.PersistentFlags()
	pf.AddFlagSet(c.s.fs)
	pf.StringVar(&c.configPath, "config", "", "config file (YAML; default $THAWD_CONFIG, else "+defaultConfigFile+" if it exists)")
	root.Flags().BoolVar(&c.checkOnly, "check-config", false, "check the configuration, print the settings in force and exit (as 'thawd config check')")
	root.InitDefaultVersionFlag()
	root.InitDefaultHelpFlag()
	root.CompletionOptions.HiddenDefaultCmd = true

	cfg := groupCmd("config", "Check the configuration, or print a default config file")
	cfg.AddCommand(&cobra.Command{
		Use:   "check",
		Short: "Check the configuration (flags, THAWD_* environment, config file) and print the settings in force",
		Long: `Check the configuration as thawd does at start, without starting: every problem
is listed (exit code 1). When it is valid, print the settings in force as a
config file, each with where its value came from (flag, env, file:line or
default).`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return c.check() },
	}, &cobra.Command{
		Use:   "default",
		Short: "Print a config file with every setting at its default, each described",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return writeDefault(c.stdout) },
	})
	root.AddCommand(cfg, c.registryCmd(), c.secretsCmd())
	return root
}

// load fills the settings from the environment and the config file under
// the flags, and validates them: every problem at once.
func (c *command) load() error {
	path, explicit := c.configPath, c.configPath != ""
	if !explicit {
		if p, ok := c.env("THAWD_CONFIG"); ok && p != "" {
			path, explicit = p, true
		}
	}
	if !explicit {
		if _, err := os.Stat(c.defaultConfig); err == nil {
			path = c.defaultConfig
		}
	}
	var fileErr error
	var file *configFile
	if path != "" {
		file, fileErr = loadConfigFile(path, c.s.fs)
	}
	c.configPath = path
	c.s.apply(c.env, file)
	return errors.Join(fileErr, c.s.validate())
}

// loadValid is load for a command that needs a valid configuration: it
// reports every problem on stderr and fails the command.
func (c *command) loadValid() error {
	if err := c.load(); err != nil {
		fmt.Fprintf(c.stderr, "thawd: invalid configuration:\n%s", configProblems(err))
		return &exitError{code: exitFailed}
	}
	return nil
}

// groupCmd is a command that only holds subcommands: run alone, it prints
// its help.
func groupCmd(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
}

// check is thawd config check: validate and print the settings in force.
func (c *command) check() error {
	if err := c.loadValid(); err != nil {
		return err
	}
	if c.configPath != "" {
		fmt.Fprintf(c.stdout, "# config file %s\n", c.configPath)
	} else {
		fmt.Fprintf(c.stdout, "# no config file (%s does not exist)\n", c.defaultConfig)
	}
	if err := c.s.writeEffective(c.stdout); err != nil {
		return err
	}
	return nil
}

// run is thawd itself: configuration, logger, then the daemon until
// SIGINT or SIGTERM.
func (c *command) run(ctx context.Context) error {
	if err := c.loadValid(); err != nil {
		return err
	}
	level := slog.LevelInfo
	if c.s.verbose {
		level = slog.LevelDebug
	}
	log, _ := newLogger(c.s.logFormat, level) // validated by load
	d := c.s.serve.Daemon
	attrs := []any{"version", buildinfo.Version, "config", c.configPath, "data_dir", d.DataDir,
		"image", d.ImageDir, "vmm", d.VMMName}
	for _, k := range slices.Sorted(maps.Keys(d.VMMSettings)) { // the backend's own (QEMU's shim)
		attrs = append(attrs, k, d.VMMSettings[k])
	}
	log.Info("starting thawd", append(attrs, "snapbpf_object", d.SnapBPFObject)...)
	if err := c.serve(ctx, c.s.serve, log); err != nil {
		log.Error("thawd failed", "err", err)
		return &exitError{code: exitFailed}
	}
	return nil
}

// singleDashLongFlags rewrites -name and -name=value, which Go's flag
// package (thawd's before) accepted for --name, into the double-dash form,
// for every long flag thawd knows; and -v=BOOL and --v[=BOOL] into
// --verbose.
func singleDashLongFlags(root *cobra.Command, args []string) []string {
	known := func(name string) bool {
		for _, fs := range []*pflag.FlagSet{root.PersistentFlags(), root.Flags()} {
			if fs.Lookup(name) != nil {
				return true
			}
		}
		return false
	}
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		dashes := len(a) - len(strings.TrimLeft(a, "-"))
		name, val, hasVal := strings.Cut(a[dashes:], "=")
		switch {
		case dashes == 0 || dashes > 2:
		case name == "v" && (dashes == 2 || hasVal):
			a = "--verbose"
			if hasVal {
				a += "=" + val
			}
		case dashes == 1 && len(name) > 1 && known(name):
			a = "-" + a
		}
		out = append(out, a)
	}
	return out
}

// newLogger logs to stderr in format ("text" or "json").
func newLogger(format string, level slog.Level) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
