package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newEndpointCmd() *cobra.Command {
	cmd := newGroupCmd("endpoint", "Serve functions over HTTP to their callers",
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
		Args: exactArgs("FUNCTION"),
		RunE: func(_ *cobra.Command, args []string) error {
			req.Function = args[0]
			e, err := a.c.CreateEndpoint(a.ctx, req)
			if err != nil {
				return err
			}
			if err := a.printEndpoint(e); err != nil {
				return err
			}
			if e.Key != "" && !a.json {
				fmt.Fprintln(a.stderr, "thaw: the key is shown only now; keep it ('thaw endpoint rotate-key' makes a new one)")
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
	list := newListCmd("endpoints", listRunE(a, (*client.Client).ListEndpoints, []string{"NAME", "FUNCTION", "PATH", "AUTH", "KEY", "CREATED"},
		func(e *client.Endpoint) []string {
			return []string{e.Name, e.Function, e.PathPrefix, e.Auth, orDash(e.KeyHint), fmtAge(e.CreatedAt)}
		}))
	get := newGetCmd("endpoint", "NAME", oneRunE(a, (*client.Client).GetEndpoint, a.printEndpoint))
	rotate := &cobra.Command{Use: "rotate-key NAME", Short: "Give an endpoint a new key (the old one stops working at once)",
		Args: exactArgs("NAME"), RunE: oneRunE(a, (*client.Client).RotateEndpointKey, a.printEndpoint)}
	del := &cobra.Command{Use: "delete NAME...", Aliases: []string{"rm"}, Short: "Delete endpoints", Args: minArgs("endpoint name"),
		RunE: func(_ *cobra.Command, args []string) error { return a.deleteAll("endpoint", args, a.c.DeleteEndpoint) }}
	cmd.AddCommand(create, list, get, rotate, del)
	return cmd
}

func (a *app) printEndpoint(e *client.Endpoint) error {
	return a.printObject(e, "endpoint", termtext.Line(e.Name), func(w io.Writer) {
		row(w, "function", e.Function)
		row(w, "path prefix", e.PathPrefix)
		row(w, "auth", e.Auth)
		if e.Key != "" {
			row(w, "key", e.Key)
		} else if e.KeyHint != "" {
			row(w, "key", e.KeyHint+"...")
		}
		row(w, "expose errors", fmt.Sprint(e.ExposeErrors))
		row(w, "created", fmtTime(e.CreatedAt))
		if !e.KeyRotatedAt.IsZero() {
			row(w, "key rotated", fmtTime(e.KeyRotatedAt))
		}
	})
}
