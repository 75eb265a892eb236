package deploy

import (
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

func (a *app) newDeployCmd() *cobra.Command {
	f := &cli.FunctionFlags{}
	var (
		ev                          cli.EventFlags
		detach, noPromote, prepared bool
	)
	cmd := &cobra.Command{
		Use:   "deploy NAME --dir DIR",
		Short: "Create or update a function and publish a new version of it",
		Long: `Deploy a function in one step: thawd builds its code's disk and its
dependency layer (from requirements.txt), boots a VM of it (a handler that
cannot be imported fails the deploy, with its traceback), snapshots it and
publishes an immutable version (1, 2, 3, ...), with the live alias moved to
it unless --no-promote. 'thaw invoke NAME' then runs it; NAME:VERSION and
NAME:ALIAS run others, and 'thaw rollback NAME' moves live back.

Deploying the same code, dependencies and settings again returns the
version that has them and changes nothing. Settings left out keep the
function's current ones (a new function: the daemon's defaults); the
settings are those of 'thaw function create'. --prepare also builds the
restore strategies' artifacts (reap, faasnap, snapbpf), as 'thaw prepare'
does, with --event as the record input.

A deploy runs as an operation in thawd and its steps are shown on stderr;
--detach (or Ctrl-C) leaves it running (see 'thaw operation').`,
		Example: `  thaw deploy hello --dir ./functions/hello
  thaw deploy hello --dir ./functions/hello --memory 512 --no-promote
  thaw deploy pagerank --dir ./functions/pagerank --prepare --event '{"size":1000}'`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			req, err := a.deployRequest(cmd, f, &ev)
			if err != nil {
				return err
			}
			req.NoPromote, req.Prepare = noPromote, prepared
			if f.ServerDir {
				if detach {
					return cli.Usagef("--detach uploads the code; with --server-dir run it without --detach")
				}
				abs, err := filepath.Abs(f.Dir)
				if err != nil {
					return err
				}
				req.Directory = abs
				d, err := a.C.DeployFromServerDir(a.Ctx, args[0], req)
				if err != nil {
					return err
				}
				return a.PrintDeploy(d)
			}
			if st, err := os.Stat(f.Dir); err != nil {
				return cli.Usagef("--dir: %v", err)
			} else if !st.IsDir() {
				return cli.Usagef("--dir %s is not a directory", f.Dir)
			}
			return a.RunOperation(detach, func() (*client.Operation, error) {
				return a.C.StartDeployFromDir(a.Ctx, args[0], f.Dir, req)
			})
		},
	}
	cli.AddDetach(cmd, &detach)
	addDeployFlags(cmd, f, &noPromote, &prepared, &ev)
	return cmd
}

// addDeployFlags adds deploy's settings flags (those of function create,
// and what to do with the version).
func addDeployFlags(cmd *cobra.Command, f *cli.FunctionFlags, noPromote, prepared *bool, ev *cli.EventFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.Dir, "dir", "", "directory with the function's code (required)")
	fl.IntVar(&f.Memory, "memory", 0, "guest memory in MiB (default: the function's, or the daemon's)")
	fl.IntVar(&f.VCPUs, "vcpus", 0, "number of vCPUs (default: the function's, or the daemon's)")
	fl.BoolVar(&f.ServerDir, "server-dir", false, "DIR is on the daemon's host: send its path instead of uploading it")
	fl.StringArrayVar(&f.Allow, "allow", nil, "a host:port service the guests may reach (repeatable)")
	fl.StringVar(&f.Egress, "egress", "", "what the guests may reach: none, services (the --allow list) or full")
	fl.IntVar(&f.MaxConc, "max-concurrency", 0, "live VMs of this function at most")
	fl.IntVar(&f.KeepAlive, "keep-alive", 0, "seconds a VM is kept idle after a cold invocation (-1: never)")
	fl.IntVar(&f.VMMPool, "vmm-pool", 0, "VMMs started ahead of restores per snapshot and strategy, 1-16 (-1: none)")
	fl.IntVar(&f.VMMPoolTTL, "vmm-pool-ttl", 0, "seconds a VMM started ahead waits for a restore")
	fl.StringArrayVar(&f.Env, "env", nil, "an environment variable NAME=VALUE, set at boot (repeatable; default: the function's)")
	fl.StringArrayVar(&f.Secrets, "secret", nil, "ENV=SECRET: the secret's value in environment variable ENV of restored VMs (repeatable; default: the function's)")
	fl.BoolVar(noPromote, "no-promote", false, "publish the version without moving the live alias to it")
	fl.BoolVar(prepared, "prepare", false, "also build the restore strategies' artifacts (as 'thaw prepare')")
	ev.Add(cmd, "the record input of --prepare")
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagDirname("dir")
}

// deployRequest checks deploy's flags and builds its request.
func (a *app) deployRequest(cmd *cobra.Command, f *cli.FunctionFlags, ev *cli.EventFlags) (client.DeployRequest, error) {
	var req client.DeployRequest
	for _, n := range []struct {
		flag string
		v    int
	}{{"--memory", f.Memory}, {"--vcpus", f.VCPUs}, {"--max-concurrency", f.MaxConc}} {
		if n.v < 0 {
			return req, cli.Usagef("%s must be positive, got %d", n.flag, n.v)
		}
	}
	if cmd.Flags().Changed("event") || cmd.Flags().Changed("event-file") {
		if !cmd.Flags().Changed("prepare") {
			return req, cli.Usagef("--event is the record input of --prepare: give --prepare too")
		}
		event, err := ev.Read(a.App, cmd)
		if err != nil {
			return req, err
		}
		req.RecordEvent = event
	}
	req.MemoryMiB, req.VCPUs, req.MaxConcurrency = f.Memory, f.VCPUs, f.MaxConc
	req.KeepAliveS, req.VMMPool, req.VMMPoolTTLS = f.KeepAlive, f.VMMPool, f.VMMPoolTTL
	if f.Egress != "" || len(f.Allow) > 0 {
		req.Network = &client.Network{Egress: f.Egress, Services: f.Allow}
	}
	var err error
	if req.Env, err = cli.Assignments("env", f.Env); err != nil {
		return req, err
	}
	req.Secrets, err = cli.Assignments("secret", f.Secrets)
	return req, err
}
