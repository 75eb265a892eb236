package endpoint

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newEndpointCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("endpoint", "Serve functions over HTTP to their callers",
		`An endpoint serves a function to its callers over plain HTTP on the
daemon's functions listener (thawd --functions-listen), apart from the API:
a request under its path prefix becomes an event (Lambda's function URL
payload 2.0) and the function's result becomes the response. With
--auth key, callers send the endpoint's key (Authorization: Bearer KEY, or
X-Thaw-Key); the API token is never accepted there.`, "endpoints", "ep")
	var req client.CreateEndpointRequest
	create := &cobra.Command{
		Use:   "create FUNCTION[:ALIAS|:VERSION]",
		Short: "Create an endpoint (its key, with --auth key, is shown once)",
		Example: `  thaw endpoint create hello
  thaw endpoint create hello:live --auth key --path-prefix /api/hello
  curl -H "Authorization: Bearer $KEY" http://127.0.0.1:8080/api/hello?name=you`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(_ *cobra.Command, args []string) error {
			req.Function = args[0]
			e, err := a.C.CreateEndpoint(a.Ctx, req)
			if err != nil {
				return err
			}
			if err := a.printEndpoint(e); err != nil {
				return err
			}
			if e.Key != "" && !a.JSON {
				fmt.Fprintln(a.Stderr, "thaw: the key is shown only now; keep it ('thaw endpoint rotate-key' makes a new one)")
			}
			return nil
		},
	}
	fl := create.Flags()
	fl.StringVar(&req.Name, "name", "", "the endpoint's name (default: the function reference, ':' as '-')")
	fl.StringVar(&req.Auth, "auth", "none", "none, or key (a per-endpoint key, stored as a hash)")
	fl.StringVar(&req.PathPrefix, "path-prefix", "", "path prefix it serves (default /NAME)")
	fl.BoolVar(&req.ExposeErrors, "expose-errors", false, "answer a handler's error (502) with its type, message and traceback")
	_ = create.RegisterFlagCompletionFunc("auth", cobra.FixedCompletions([]string{"none", "key"}, cobra.ShellCompDirectiveNoFileComp))
	list := cli.NewListCmd("endpoints", cli.ListRunE(a.App, (*client.Client).ListEndpoints, []string{"NAME", "FUNCTION", "PATH", "AUTH", "KEY", "CREATED"},
		func(e *client.Endpoint) []string {
			return []string{e.Name, e.Function, e.PathPrefix, e.Auth, output.OrDash(e.KeyHint), output.FmtAge(e.CreatedAt)}
		}))
	get := cli.NewGetCmd("endpoint", "NAME", cli.OneRunE(a.App, (*client.Client).GetEndpoint, a.printEndpoint))
	rotate := &cobra.Command{Use: "rotate-key NAME", Short: "Give an endpoint a new key (the old one stops working at once)",
		Args: cli.ExactArgs("NAME"), RunE: cli.OneRunE(a.App, (*client.Client).RotateEndpointKey, a.printEndpoint)}
	del := &cobra.Command{Use: "delete NAME...", Aliases: []string{"rm"}, Short: "Delete endpoints", Args: cli.MinArgs("endpoint name"),
		RunE: func(_ *cobra.Command, args []string) error { return a.DeleteAll("endpoint", args, a.C.DeleteEndpoint) }}
	cmd.AddCommand(create, list, get, rotate, del)
	return cmd
}

func (a *app) printEndpoint(e *client.Endpoint) error {
	return a.PrintObject(e, "endpoint", termtext.Line(e.Name), func(w io.Writer) {
		output.Row(w, "function", e.Function)
		output.Row(w, "path prefix", e.PathPrefix)
		output.Row(w, "auth", e.Auth)
		if e.Key != "" {
			output.Row(w, "key", e.Key)
		} else if e.KeyHint != "" {
			output.Row(w, "key", e.KeyHint+"...")
		}
		output.Row(w, "expose errors", fmt.Sprint(e.ExposeErrors))
		output.Row(w, "created", output.FmtTime(e.CreatedAt))
		if !e.KeyRotatedAt.IsZero() {
			output.Row(w, "key rotated", output.FmtTime(e.KeyRotatedAt))
		}
	})
}
