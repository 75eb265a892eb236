package main

import (
	"github.com/spf13/cobra"
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
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit must be positive, got %d", limit)
			}
			recs, err := a.c.ListInvocations(a.ctx, function, limit)
			if err != nil {
				return err
			}
			if a.json {
				return printList(a, recs)
			}
			w := newTable(a.stdout)
			row(w, "ID", "FUNCTION", "MODE", "STATUS", "TOTAL", "VM", "SNAPSHOT", "STRATEGY", "CREATED")
			for _, r := range recs {
				status := "ok"
				if !r.OK {
					status = "error"
					if e := r.Detail.Error; e != nil && e.Type != "" {
						status += ": " + truncate(e.Type, 30)
					}
				}
				row(w, r.ID, r.Function, orDash(r.Detail.Mode), status, fmtMS(r.Detail.Timing.TotalMS),
					orDash(r.VM), orDash(r.Snapshot), orDash(r.Strategy), fmtAge(r.CreatedAt))
			}
			return w.Flush()
		},
	}
	cmd.Flags().StringVarP(&function, "function", "f", "", "only the invocations of this function")
	cmd.Flags().IntVarP(&limit, "limit", "n", 0, "at most this many (default: the daemon's, 100)")
	return cmd
}
