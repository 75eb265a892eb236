package function

import (
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

func (a *app) newFunctionCmd(more ...*cobra.Command) *cobra.Command {
	cmd := cli.NewGroupCmd("function", "Create, list, show and delete functions",
		`A function is a directory of code (a handler the guest agent calls) plus
its VM settings: memory and vCPUs. Create one, boot a VM for it, snapshot
the VM, then invoke the function from the snapshot.`, "fn")
	cmd.AddCommand(a.newFunctionCreateCmd(), a.newFunctionListCmd(), a.newFunctionGetCmd(), a.newFunctionDeleteCmd(),
		a.newFunctionRestoreCmd(), a.newFunctionRefreshCmd())
	cmd.AddCommand(more...)
	return cmd
}

func (a *app) newFunctionCreateCmd() *cobra.Command {
	f := &cli.FunctionFlags{}
	cmd := &cobra.Command{
		Use:   "create NAME --dir DIR",
		Short: "Create a function from a directory of code",
		Long: `Create a function from a directory of code.

By default thaw packs DIR into a tar.gz and uploads it, so this works with a
daemon on another host too. With --server-dir, DIR is a directory on the
daemon's host and the daemon reads it itself (a relative DIR is made
absolute against the current directory first).

A requirements.txt beside handler.py names the packages the function
needs: the daemon resolves it now (wheels for the guest's CPython 3.11,
from its package index) into the function's dependency layer, and the
create fails, naming the package and why, if it cannot. 'thaw function get'
shows what was installed.

--memory and --vcpus default to the daemon's settings. --max-concurrency
bounds the function's live VMs: more starts wait for room, then get 429.
--keep-alive sets how long a VM stays idle after a cold invocation so that
the function's next invocations run on it warm (-1: never). --vmm-pool sets
how many VMMs the daemon starts ahead of restores for each snapshot and
strategy of the function, so that a cold start skips the VMM's start (-1:
none); --vmm-pool-ttl how long one waits unused.

--env NAME=VALUE sets an environment variable in the function's guests at
boot, before the handler is imported (module-level code sees it); it is
part of the function's snapshots. --secret ENV=SECRET sets environment
variable ENV to the value of secret SECRET (thaw secret set) in every VM
restored from a snapshot, before on_restore() and the handler run; booted
VMs never get it, so no snapshot holds it, and a new value takes effect at
the next cold start.

--strategy auto lets thaw choose each cold start's restore strategy from the
function's own measurements; --refresh says when its recorded working sets
are recorded again after the inputs drifted (thaw function restore --help).

By default the function's guests reach nothing: not the daemon's host, not
the network beyond it. --allow HOST:PORT lets them reach one service, which
the daemon proxies (a service on the daemon's loopback, 127.0.0.1:PORT, is
10.0.2.2:PORT inside the guest); --egress full lets them reach anything
beyond the host, if the daemon was started with --allow-full-egress.`,
		Example: `  thaw function create hello --dir ./functions/hello
  thaw fn create big --dir ./functions/big --memory 1024 --vcpus 2
  thaw fn create hello --dir /srv/functions/hello --server-dir
  thaw fn create image --dir ./functions/image --allow 127.0.0.1:6379
  thaw fn create app --dir ./app --env LOG_LEVEL=info --secret DB_PASSWORD=db-password`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error { return a.createFunction(args[0], f) },
	}
	fl := cmd.Flags()
	fl.StringVarP(&f.Dir, "dir", "d", "", "directory with the function's code (required)")
	fl.IntVar(&f.Memory, "memory", 0, "guest memory in MiB (default: the daemon's)")
	fl.IntVar(&f.VCPUs, "vcpus", 0, "number of vCPUs (default: the daemon's)")
	fl.BoolVar(&f.ServerDir, "server-dir", false, "DIR is on the daemon's host: send its path instead of uploading it")
	fl.StringArrayVar(&f.Allow, "allow", nil, "a host:port service the guests may reach (repeatable; 127.0.0.1:PORT is 10.0.2.2:PORT in the guest)")
	fl.StringVar(&f.Egress, "egress", "", "what the guests may reach: none (default), services (the --allow list) or full (if the daemon allows it)")
	fl.IntVar(&f.MaxConc, "max-concurrency", 0, "live VMs of this function at most (default: only the daemon's host budget)")
	fl.IntVar(&f.KeepAlive, "keep-alive", 0, "seconds a VM is kept idle after a cold invocation, for the next ones to run warm (default: the daemon's; -1: never)")
	fl.IntVar(&f.VMMPool, "vmm-pool", 0, "VMMs started ahead of restores per snapshot and strategy, 1-16 (default: the daemon's; -1: none)")
	fl.IntVar(&f.VMMPoolTTL, "vmm-pool-ttl", 0, "seconds a VMM started ahead waits for a restore (default: the daemon's)")
	fl.StringArrayVar(&f.Env, "env", nil, "an environment variable NAME=VALUE, set at boot (repeatable; part of the snapshots)")
	fl.StringArrayVar(&f.Secrets, "secret", nil, "ENV=SECRET: the secret's value in environment variable ENV of restored VMs (repeatable; never in a snapshot)")
	f.Restore.Add(fl)
	_ = cmd.MarkFlagRequired("dir")
	_ = cmd.MarkFlagDirname("dir")
	return cmd
}

func (a *app) newFunctionListCmd() *cobra.Command {
	return cli.NewListCmd("functions", cli.ListRunE(a.App, (*client.Client).ListFunctions,
		[]string{"NAME", "MEMORY", "VCPUS", "DIGEST", "CREATED"},
		func(f *client.Function) []string {
			return []string{f.Name, output.FmtMiB(f.MemoryMiB), fmt.Sprint(f.VCPUs), output.ShortDigest(f.Digest), output.FmtAge(f.CreatedAt)}
		}))
}

func (a *app) newFunctionGetCmd() *cobra.Command {
	return cli.NewGetCmd("function", "NAME", cli.OneRunE(a.App, (*client.Client).GetFunction, func(f *client.Function) error {
		if err := a.printFunction(f, ""); err != nil || a.JSON {
			return err
		}
		if err := a.printRestore(f.Restore); err != nil {
			return err
		}
		return a.printVersionsSummary(f.Name)
	}))
}

// printVersionsSummary adds a function's versions and aliases to thaw
// function get's table.
func (a *app) printVersionsSummary(name string) error {
	vs, err := a.C.ListVersions(a.Ctx, name)
	if err != nil || len(vs) == 0 {
		return err
	}
	as, err := a.C.ListAliases(a.Ctx, name)
	if err != nil {
		return err
	}
	w := output.NewTable(a.Stdout)
	output.Row(w, "Versions:", fmt.Sprintf("%d (newest %d; thaw function versions %s)", len(vs), vs[len(vs)-1].Version, name))
	for _, al := range as {
		output.Row(w, "Alias "+al.Name+":", output.FmtRouting(al.Routing))
	}
	return w.Flush()
}

// printFunction prints a function, after a headline saying what happened
// to it if there is one.
func (a *app) printFunction(f *client.Function, headline string) error {
	return a.PrintObject(f, headline, f.Name, func(w io.Writer) {
		output.Row(w, "Name:", f.Name)
		output.Row(w, "Digest:", output.OrDash(f.Digest))
		output.Row(w, "Memory:", output.FmtMiB(f.MemoryMiB))
		output.Row(w, "vCPUs:", fmt.Sprint(f.VCPUs))
		if f.MaxConcurrency > 0 {
			output.Row(w, "Max VMs:", fmt.Sprint(f.MaxConcurrency))
		}
		switch {
		case f.KeepAliveS < 0:
			output.Row(w, "Keep-alive:", "never")
		case f.KeepAliveS > 0:
			output.Row(w, "Keep-alive:", fmt.Sprintf("%d s", f.KeepAliveS))
		}
		switch {
		case f.VMMPool < 0:
			output.Row(w, "VMM pool:", "none")
		case f.VMMPool > 0 || f.VMMPoolTTLS > 0:
			pool := "the daemon's size"
			if f.VMMPool > 0 {
				pool = fmt.Sprintf("%d per snapshot and strategy", f.VMMPool)
			}
			if f.VMMPoolTTLS > 0 {
				pool += fmt.Sprintf(", %d s unused", f.VMMPoolTTLS)
			}
			output.Row(w, "VMM pool:", pool)
		}
		output.Row(w, "Code dir:", output.OrDash(f.CodeDir))
		output.Row(w, "Disk:", output.OrDash(f.Disk))
		output.Row(w, "Egress:", fmtNetwork(f.Network))
		for i, k := range slices.Sorted(maps.Keys(f.Env)) {
			output.Row(w, map[bool]string{true: "Env:"}[i == 0], k+"="+f.Env[k])
		}
		for i, k := range slices.Sorted(maps.Keys(f.Secrets)) {
			output.Row(w, map[bool]string{true: "Secrets:"}[i == 0], k+" = secret "+f.Secrets[k])
		}
		writeDeps(w, f.Deps)
		output.Row(w, "Created:", output.FmtTime(f.CreatedAt))
		for i, warning := range f.Warnings {
			output.Row(w, map[bool]string{true: "Warnings:"}[i == 0], warning)
		}
	})
}

func netOpts(egress string, allow []string) []client.FunctionOption {
	var o []client.FunctionOption
	if egress != "" {
		o = append(o, client.WithEgress(egress))
	}
	if len(allow) > 0 {
		o = append(o, client.WithServices(allow...))
	}
	return o
}

func fmtNetwork(n client.Network) string {
	switch {
	case n.Egress == "":
		return "none"
	case len(n.Services) > 0:
		return n.Egress + " (" + strings.Join(n.Services, ", ") + ")"
	}
	return n.Egress
}

// createFunction runs thaw function create NAME.
func (a *app) createFunction(name string, f *cli.FunctionFlags) error {
	if f.Memory < 0 {
		return cli.Usagef("--memory must be positive, got %d", f.Memory)
	}
	if f.VCPUs < 0 {
		return cli.Usagef("--vcpus must be positive, got %d", f.VCPUs)
	}
	if f.MaxConc < 0 {
		return cli.Usagef("--max-concurrency must be positive, got %d", f.MaxConc)
	}
	opts := netOpts(f.Egress, f.Allow)
	if f.MaxConc > 0 {
		opts = append(opts, client.WithMaxConcurrency(f.MaxConc))
	}
	if f.VMMPool != 0 || f.VMMPoolTTL != 0 {
		opts = append(opts, client.WithVMMPool(f.VMMPool, f.VMMPoolTTL))
	}
	if f.KeepAlive != 0 {
		opts = append(opts, client.WithKeepAlive(f.KeepAlive))
	}
	env, err := cli.Assignments("env", f.Env)
	if err != nil {
		return err
	}
	refs, err := cli.Assignments("secret", f.Secrets)
	if err != nil {
		return err
	}
	opts = append(opts, client.WithEnv(env), client.WithSecrets(refs))
	ropts, err := f.Restore.Options()
	if err != nil {
		return err
	}
	opts = append(opts, ropts...)
	var fn *client.Function
	if f.ServerDir {
		abs, aerr := filepath.Abs(f.Dir)
		if aerr != nil {
			return aerr
		}
		fn, err = a.C.CreateFunctionFromServerDir(a.Ctx, name, abs, f.Memory, f.VCPUs, opts...)
	} else {
		st, serr := os.Stat(f.Dir)
		if serr != nil {
			return cli.Usagef("--dir: %v", serr)
		}
		if !st.IsDir() {
			return cli.Usagef("--dir %s is not a directory", f.Dir)
		}
		fn, err = a.C.CreateFunctionFromDir(a.Ctx, name, f.Dir, f.Memory, f.VCPUs, opts...)
	}
	if err != nil {
		return err
	}
	return a.printFunction(fn, "created function")
}
