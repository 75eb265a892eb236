package completion

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// Timeout bounds a completion's questions to the daemon: a shell
// waits for them on every TAB.
const Timeout = 2 * time.Second

// completer lists the candidates of one kind of argument, each with a
// description ("value\tdescription"), asking the daemon.
type completer func(a *cli.App, ctx context.Context, c *client.Client) ([]string, error)

// argCompletions: the commands whose arguments name daemon objects, and
// of which kind. many: every argument (delete ID...), else only the first.
var argCompletions = map[string]struct {
	kind completer
	many bool
}{
	"thaw function get":        {functionNames, false},
	"thaw function delete":     {functionNames, false},
	"thaw vm boot":             {functionNames, false},
	"thaw invoke":              {functionNames, false},
	"thaw logs":                {functionNames, false},
	"thaw prepare":             {functionNames, false},
	"thaw vm restore":          {snapshotIDs, false},
	"thaw vm get":              {vmIDs, false},
	"thaw vm delete":           {vmIDs, true},
	"thaw vm pause":            {vmIDs, false},
	"thaw vm resume":           {vmIDs, false},
	"thaw snapshot create":     {vmIDs, false},
	"thaw snapshot get":        {snapshotIDs, false},
	"thaw snapshot pin":        {snapshotIDs, false},
	"thaw snapshot unpin":      {snapshotIDs, false},
	"thaw snapshot evict":      {snapshotIDs, false},
	"thaw snapshot verify":     {snapshotIDs, false},
	"thaw snapshot copy":       {snapshotIDs, false},
	"thaw snapshot delete":     {snapshotIDs, true},
	"thaw snapshot store":      {snapshotIDs, true},
	"thaw secret get":          {secretNames, false},
	"thaw secret set":          {secretNames, false},
	"thaw secret delete":       {secretNames, true},
	"thaw endpoint create":     {functionNames, false},
	"thaw endpoint get":        {endpointNames, false},
	"thaw endpoint rotate-key": {endpointNames, false},
	"thaw endpoint delete":     {endpointNames, true},
	"thaw schedule create":     {functionNames, false},
	"thaw schedule get":        {scheduleNames, false},
	"thaw schedule pause":      {scheduleNames, false},
	"thaw schedule resume":     {scheduleNames, false},
	"thaw schedule delete":     {scheduleNames, true},
	"thaw async set":           {functionNames, false},
	"thaw async get":           {functionNames, false},
	"thaw async reset":         {functionNames, false},
	"thaw dlq show":            {deadLetterIDs, false},
	"thaw dlq replay":          {deadLetterIDs, false},
}

// flagCompletions: flags that name daemon objects, on whichever command
// has them; list: a comma-separated list of them.
var flagCompletions = map[string]struct {
	kind completer
	list bool
}{
	"function":   {functionNames, false},
	"vm":         {vmIDs, false},
	"snapshot":   {snapshotIDs, false},
	"strategy":   {strategyNames, false},
	"strategies": {strategyNames, true},
}

// registerCompletions makes TAB complete function names, VM and snapshot
// ids and strategy names from the daemon, for every command in the tree.
func (a *app) registerCompletions(root *cobra.Command) {
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		if ac, ok := argCompletions[cmd.CommandPath()]; ok {
			cmd.ValidArgsFunction = a.completeArgs(ac.kind, ac.many)
		}
		for name, fc := range flagCompletions {
			if cmd.LocalNonPersistentFlags().Lookup(name) != nil {
				_ = cmd.RegisterFlagCompletionFunc(name, a.completeFlag(fc.kind, fc.list))
			}
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func (a *app) completeArgs(kind completer, many bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !many {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, c := range a.candidates(cmd, kind) {
			if v, _, _ := strings.Cut(c, "\t"); !slices.Contains(args, v) {
				out = append(out, c)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

func (a *app) completeFlag(kind completer, list bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if list && strings.Contains(toComplete, ",") {
			// A comma-separated list: complete its last element.
			done := toComplete[:strings.LastIndex(toComplete, ",")+1]
			var out []cobra.Completion
			for _, c := range a.candidates(cmd, kind) {
				out = append(out, done+c)
			}
			return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		}
		return a.candidates(cmd, kind), cobra.ShellCompDirectiveNoFileComp
	}
}

// candidates asks the daemon at --url (or THAW_URL) for kind's
// candidates within Timeout; any failure is no candidates (a
// completion has nowhere to report it).
func (a *app) candidates(cmd *cobra.Command, kind completer) []string {
	c, err := client.NewFromEnv(a.URL)
	if err != nil {
		return nil
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	out, err := kind(a.App, ctx, c)
	if err != nil {
		return nil
	}
	return out
}

// listed is the completer of a kind the daemon lists: one candidate per
// item, line(item) being "value\tdescription".
func listed[T any](list func(*client.Client, context.Context) ([]T, error), line func(T) string) completer {
	return func(_ *cli.App, ctx context.Context, c *client.Client) ([]string, error) {
		items, err := list(c, ctx)
		var out []string
		for _, it := range items {
			out = append(out, line(it))
		}
		return out, err
	}
}

var (
	functionNames = listed((*client.Client).ListFunctions, func(f client.Function) string {
		return fmt.Sprintf("%s\t%d MiB, %d vCPU", f.Name, f.MemoryMiB, f.VCPUs)
	})
	vmIDs = listed((*client.Client).ListVMs, func(v client.VM) string {
		return fmt.Sprintf("%s\t%s, %s", v.ID, v.Function, output.VMState(&v))
	})
	snapshotIDs = listed(allSnapshots, func(s client.Snapshot) string {
		return fmt.Sprintf("%s\t%s, %s", s.ID, s.Function, s.CreatedAt.Format(time.DateTime))
	})
)

var (
	endpointNames = listed((*client.Client).ListEndpoints, func(e client.Endpoint) string {
		return fmt.Sprintf("%s\t%s at %s", e.Name, e.Function, e.PathPrefix)
	})
	scheduleNames = listed((*client.Client).ListSchedules, func(s client.Schedule) string {
		return fmt.Sprintf("%s\t%s, %s", s.Name, s.Function, s.Cron)
	})
	deadLetterIDs = listed(func(c *client.Client, ctx context.Context) ([]client.DeadLetter, error) {
		return c.ListDeadLetters(ctx, "", 1000)
	}, func(d client.DeadLetter) string {
		return fmt.Sprintf("%s\t%s, %s", d.Outcome.ID, d.Outcome.Function, d.Outcome.Condition)
	})
)

func allSnapshots(c *client.Client, ctx context.Context) ([]client.Snapshot, error) {
	return c.ListSnapshots(ctx, "")
}

// strategyNames are the strategies the daemon offers: its registry, in
// its order (GET /v1/info).
func strategyNames(_ *cli.App, ctx context.Context, c *client.Client) ([]string, error) {
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	return info.Strategies, nil
}

// secretNames completes secret names.
var secretNames = listed((*client.Client).ListSecrets, func(s client.Secret) string {
	return fmt.Sprintf("%s\tversion %d", s.Name, s.Version)
})
