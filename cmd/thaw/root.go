package main

import (
	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/async"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/bench"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/completion"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/deploy"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/endpoint"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/function"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/info"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/invoke"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/logs"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/operation"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/prepare"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/registry"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/schedule"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/secret"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/vm"
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

// newRootCmd is thaw's command tree, run by a: every command package's
// commands, their arguments completing from the daemon.
func newRootCmd(a *cli.App) *cobra.Command {
	root := cli.NewRoot(a, "thaw", "Command-line client for the thawd microVM snapshot daemon", rootLong)
	root.AddCommand(
		info.NewCommand(a),
		function.NewCommand(a, deploy.NewFunctionVersionsCommand(a)),
		vm.NewCommand(a),
		snapshot.NewCommand(a),
		registry.NewCommand(a),
		deploy.NewCommand(a),
		secret.NewCommand(a),
		invoke.NewCommand(a),
		endpoint.NewCommand(a),
		async.NewCommand(a),
		async.NewDLQCommand(a),
		schedule.NewCommand(a),
		deploy.NewAliasCommand(a),
		deploy.NewRollbackCommand(a),
		prepare.NewCommand(a),
		logs.NewInvocationsCommand(a),
		logs.NewCommand(a),
		operation.NewCommand(a),
		info.NewOpenAPICommand(a),
		bench.NewCommand(a),
		info.NewVersionCommand(a),
		completion.NewCommand(a),
	)
	completion.Register(a, root)
	a.WrapRunE(root)
	return root
}
