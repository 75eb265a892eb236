package main

import (
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

const rootLong = `thaw manages functions, microVMs and snapshots on a thawd daemon and
invokes functions, cold (restored from a snapshot) or warm (on a running VM).

The usual flow:

  thaw function create hello --dir ./functions/hello
  thaw vm boot hello                 # boots a VM and waits until it is ready
  thaw snapshot create VM_ID         # snapshots the booted VM
  thaw invoke hello --event '{"name": "thaw"}'   # cold start from the snapshot

The daemon is found at --url, else $THAW_URL, else ` + client.DefaultURL + `
(thawd's Unix socket: root and members of thawd's --socket-group may use it,
and no token is needed).

Over http:// or https:// (thawd --listen host:port) thaw sends the daemon's
API token: $THAW_TOKEN, else the contents of the file $THAW_TOKEN_FILE, else
` + client.DefaultTokenFile + ` if this user can read it (thawd writes the token to
<data-dir>/token at first start). For https with a private CA, set
$THAW_CACERT to its PEM file.

  export THAW_URL=http://127.0.0.1:7380 THAW_TOKEN_FILE=/var/lib/thaw/token

Output: stdout carries only the command's document, so it can be
redirected and parsed: a table (-o table, the default; -o wide adds every
column), the daemon's JSON or YAML documents (-o json, -o yaml; --json is
-o json; lists as {"items": [...]}), or with -q only ids, one a line (lists,
and commands that create or start something). 'thaw invoke' prints the
function's result, as JSON. Progress, timing, warnings and errors go to
stderr; with -o json or yaml errors are a document there too:
{"error": {"code": ..., "message": ..., "request_id": ...}}.

Exit codes:
  0    success
  1    error (the daemon refused or failed the request, it is unreachable, ...)
  2    usage error (unknown command or flag, bad arguments or flag values,
       invalid --event, a missing input file; a request the daemon refused
       as malformed, 400)
  3    the function ran but raised an exception (thaw invoke)
  130  interrupted (Ctrl-C); 143 on SIGTERM`

func (a *App) newRootCmd() *cobra.Command {
	defURL := os.Getenv("THAW_URL")
	if defURL == "" {
		defURL = client.DefaultURL
	}
	root := &cobra.Command{
		Use:           "thaw",
		Short:         "Command-line client for the thawd microVM snapshot daemon",
		Long:          rootLong,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(a.Stdin)
	root.SetOut(a.Stdout)
	root.SetErr(a.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &UsageError{msg: err.Error()}
	})
	pf := root.PersistentFlags()
	pf.StringVar(&a.URL, "url", defURL, "thawd's address: unix:/path/to/socket, or http(s)://host:port with a token (env THAW_URL; token from THAW_TOKEN or THAW_TOKEN_FILE)")
	pf.StringVarP(&a.Output, "output", "o", "", "output format: table (the default), wide (every column), json or yaml (the daemon's documents)")
	pf.BoolVar(&a.JSONFlag, "json", false, "print the daemon's JSON documents instead of tables (-o json)")
	pf.BoolVarP(&a.Quiet, "quiet", "q", false, "print only ids, one a line (lists, and commands that create or start something); invoke: only the result")
	pf.DurationVar(&a.Timeout, "timeout", 10*time.Minute, "overall timeout of the request to thawd")

	root.AddCommand(
		a.newInfoCmd(),
		a.newFunctionCmd(),
		a.newVMCmd(),
		a.newSnapshotCmd(),
		a.newRegistryCmd(),
		a.newDeployCmd(),
		a.newSecretCmd(),
		a.newInvokeCmd(),
		a.newEndpointCmd(),
		a.newAsyncCmd(),
		a.newDLQCmd(),
		a.newScheduleCmd(),
		a.newAliasCmd(),
		a.newRollbackCmd(),
		a.newPrepareCmd(),
		a.newInvocationsCmd(),
		a.newLogsCmd(),
		a.newOperationCmd(),
		a.newOpenAPICmd(),
		a.newBenchCmd(),
		a.newVersionCmd(),
		a.newCompletionCmd(),
	)
	a.registerCompletions(root)
	a.WrapRunE(root)
	return root
}
