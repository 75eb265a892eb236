package deploy

import (
	"context"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/versions"
)

func (a *app) newFunctionVersionsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "versions NAME",
		Short: "List a function's versions",
		Long: `List a function's versions, oldest first: each deploy publishes one. A
version keeps its snapshot while it is among the function's newest
(thawd --version-keep, default 5) or an alias routes to it.`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			vs, err := a.C.ListVersions(a.Ctx, args[0])
			if err != nil {
				return err
			}
			return cli.PrintTable(a.App, vs, []string{"VERSION", "ALIASES", "SNAPSHOT", "MEMORY", "CODE", "DIGEST", "CREATED"},
				func(v *client.Version) []string {
					snap := output.OrDash(v.Snapshot)
					if v.Collected {
						snap = "(collected)"
					}
					return []string{strconv.Itoa(v.Version), output.OrDash(strings.Join(v.Aliases, ",")), snap,
						output.FmtMiB(v.Config.MemoryMiB), output.ShortDigest(v.Config.Digest), output.ShortDigest(v.Digest), output.FmtAge(v.CreatedAt)}
				})
		},
	}
}

func (a *app) newAliasCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("alias", "Route a function's invocations to versions",
		`An alias names one version of a function, or splits its invocations
between two by weight (a canary). NAME:ALIAS invokes it; NAME alone follows
the alias live, which every deploy moves to its new version unless told
not to (thaw deploy --no-promote).`)
	set := &cobra.Command{
		Use:   "set NAME ALIAS VERSION[=WEIGHT] [VERSION=WEIGHT]",
		Short: "Point an alias at one version, or two by weight",
		Long: `Point an alias at one version, or split it between two: weights are
percentages that add up to 100, and one of the two may leave its weight
out to take what the other leaves. The alias is created if needed.`,
		Example: `  thaw alias set hello live 3
  thaw alias set hello live 3=90 4=10
  thaw alias set hello canary 4`,
		Args: cli.RangeArgs(3, 4, "NAME ALIAS VERSION[=WEIGHT] [VERSION=WEIGHT]"),
		RunE: func(_ *cobra.Command, args []string) error {
			routing, err := versions.ParseRouting(args[2:])
			if err != nil {
				return cli.Usagef("%v", err)
			}
			routes := make([]client.Route, len(routing))
			for i, r := range routing {
				routes[i] = client.Route{Version: r.Version, Weight: r.Weight}
			}
			al, err := a.C.SetAlias(a.Ctx, args[0], args[1], routes)
			if err != nil {
				return err
			}
			return a.printAlias(al, "alias set")
		},
	}
	get := &cobra.Command{
		Use: "get NAME ALIAS", Aliases: []string{"show"}, Short: "Show one alias", Args: cli.ExactArgs("NAME", "ALIAS"),
		RunE: func(_ *cobra.Command, args []string) error {
			al, err := a.C.GetAlias(a.Ctx, args[0], args[1])
			if err != nil {
				return err
			}
			return a.printAlias(al, "")
		},
	}
	list := &cobra.Command{
		Use: "list NAME", Aliases: []string{"ls"}, Short: "List a function's aliases", Args: cli.ExactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			as, err := a.C.ListAliases(a.Ctx, args[0])
			if err != nil {
				return err
			}
			return cli.PrintTable(a.App, as, []string{"ALIAS", "ROUTING", "UPDATED"}, func(al *client.Alias) []string {
				return []string{al.Name, output.FmtRouting(al.Routing), output.FmtAge(al.UpdatedAt)}
			})
		},
	}
	del := &cobra.Command{
		Use: "delete NAME ALIAS...", Aliases: []string{"rm"}, Short: "Delete aliases", Args: cli.RangeArgs(2, 64, "NAME ALIAS..."),
		RunE: func(_ *cobra.Command, args []string) error {
			fn := args[0]
			return a.DeleteAll("alias", args[1:], func(ctx context.Context, alias string) error { return a.C.DeleteAlias(ctx, fn, alias) })
		},
	}
	cmd.AddCommand(set, get, list, del)
	return cmd
}

func (a *app) newRollbackCmd() *cobra.Command {
	var to int
	cmd := &cobra.Command{
		Use:   "rollback NAME [--to VERSION]",
		Short: "Move a function's live alias back to an earlier version",
		Long: `Move the function's live alias back: to the version it routed to before,
or, without one, to the newest earlier version that still has its
snapshot; --to names the version. Nothing boots: the version's snapshot is
still there, and the function's next invocation restores it.`,
		Example: `  thaw rollback hello
  thaw rollback hello --to 2`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(_ *cobra.Command, args []string) error {
			if to < 0 {
				return cli.Usagef("--to must be a version number, got %d", to)
			}
			r, err := a.C.RollbackFunction(a.Ctx, args[0], to)
			if err != nil {
				return err
			}
			return a.PrintOr(r, "rolled back %s: live now routes to version %d (was %d), in %.0f ms\n", r.Function, r.To, r.From, r.MS)
		},
	}
	cmd.Flags().IntVar(&to, "to", 0, "the version to roll back to (default: the one live routed to before)")
	return cmd
}

func (a *app) printAlias(al *client.Alias, headline string) error {
	return a.PrintObject(al, headline, al.Function+":"+al.Name, func(w io.Writer) {
		output.Row(w, "Function:", al.Function)
		output.Row(w, "Alias:", al.Name)
		output.Row(w, "Routing:", output.FmtRouting(al.Routing))
		if len(al.History) > 0 {
			h := make([]string, len(al.History))
			for i, v := range al.History {
				h[i] = strconv.Itoa(v)
			}
			output.Row(w, "Before:", strings.Join(h, ", "))
		}
		output.Row(w, "Updated:", output.FmtTime(al.UpdatedAt))
	})
}
