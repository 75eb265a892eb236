package main

import (
	"context"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
)

func (a *app) newInvocationsCmd() *cobra.Command {
	var (
		function string
		limit    int
	)
	cmd := &cobra.Command{
		Use:     "invocations",
		Aliases: []string{"invs"},
		Short:   "List recent invocations, newest first",
		Example: `  thaw invocations
  thaw invocations --function hello --limit 10
  thaw --json invocations --limit 1 | jq '.items[0].detail.timing'`,
		Args: exactArgs(),
		RunE: listRunE(a, func(c *client.Client, ctx context.Context) ([]client.InvocationRecord, error) {
			if limit < 0 {
				return nil, usagef("--limit must be positive, got %d", limit)
			}
			return c.ListInvocations(ctx, function, limit)
		}, []string{"ID", "FUNCTION", "MODE", "STATUS", "TOTAL", "VM", "SNAPSHOT", "STRATEGY", "CREATED"},
			func(r *client.InvocationRecord) []string {
				status := "ok"
				if !r.OK {
					status = "error"
					if e := r.Detail.Error; e != nil && e.Type != "" {
						status += ": " + truncate(e.Type, 30)
					}
				}
				return []string{r.ID, r.Function, orDash(r.Detail.Mode), status, fmtMS(r.Detail.Timing.TotalMS),
					orDash(r.VM), orDash(r.Snapshot), orDash(r.Strategy), fmtAge(r.CreatedAt)}
			}),
	}
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the invocations of this function")
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "at most this many (default: the daemon's, 100)")
	return cmd
}
