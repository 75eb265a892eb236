package invoke

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
	"github.com/thaw-dev/thaw/internal/termtext"
)

func (a *app) newInvokeCmd() *cobra.Command {
	f := &invokeFlags{}
	cmd := &cobra.Command{
		Use:   "invoke FUNCTION",
		Short: "Invoke a function: cold from a snapshot, on a kept VM, or warm on a running VM",
		Long: `Invoke a function with a JSON event (default {}).

Cold (the default): the daemon restores a fresh VM from the function's
newest snapshot (or --snapshot) and invokes it. It then keeps the VM idle
for the function's keep-alive time, and the next invocations that name no
snapshot or strategy run on it (mode "pooled"), as fast as warm ones.
--strategy picks how memory is restored, and always restores. A strategy
that cannot restore the snapshot (its artifacts missing or damaged; for
premap, the snapshot not in the memory store) runs as vanilla: thaw warns
on stderr, or with --strict the daemon refuses and thaw exits with code 1.

Warm (--vm ID): the event goes to a VM that is already running the
function; --snapshot and --strategy do not apply. If the invocation times
out, the daemon kills that VM (a guest that does not answer cannot be
trusted): it is failed afterwards.

Timeout: --timeout-ms, else the daemon's default (thawd --invoke-timeout;
'thaw info' shows it). A timed-out invocation is in 'thaw invocations' with
its error.

stdout carries only the function's result, as JSON: 'thaw invoke f > out.json'
writes a document any JSON tool reads. --logs prints what the invocation
wrote to stdout and stderr on stderr first (every invocation's are kept:
'thaw logs FUNCTION'). Where the time went goes to stderr
(to stdout after the result with --timing; not at all with -q). If the
function raises, thaw prints its error and traceback on stderr, nothing on
stdout, and exits with code 3. With -o json (or yaml) it prints the whole
invocation document instead (exit code 3 too if the function raised).`,
		Example: `  thaw invoke hello
  thaw invoke hello --event '{"name": "thaw"}' > out.json
  thaw invoke hello --event-file event.json --strategy STRATEGY --strict
  echo '{"n": 3}' | thaw invoke hello --event-file -
  thaw invoke hello --vm vm-0123abcd --timeout-ms 5000
  thaw invoke hello --timing
  thaw invoke hello --logs           # what it printed, on stderr
  thaw -o json invoke hello | jq .timing`,
		Args: cli.ExactArgs("FUNCTION"),
		RunE: func(cmd *cobra.Command, args []string) error { return a.invoke(cmd, args[0], f) },
	}
	fl := cmd.Flags()
	f.ev.Add(cmd, "the event")
	fl.StringVar(&f.vm, "vm", "", "invoke warm, on this running VM (a timeout kills the VM)")
	fl.StringVar(&f.snapshot, "snapshot", "", "cold: restore from this snapshot instead of the function's newest")
	fl.StringVarP(&f.strategy, "strategy", "s", "", "cold: restore strategy (default: the daemon's; see 'thaw info')")
	fl.StringVar(&f.variant, "variant", "", "cold, --strategy faasnap: FaaSnap with techniques off (concurrent, no-loadingset, no-hostrec, no-freed, no-merge)")
	fl.IntVar(&f.timeoutMS, "timeout-ms", 0, "invocation timeout in milliseconds (default: the daemon's, thawd --invoke-timeout)")
	fl.BoolVar(&f.evict, "evict-cache", false, "cold: evict the snapshot's files from the host page cache first (honest cold start)")
	fl.BoolVar(&f.strict, "strict", false, "cold: fail instead of running as vanilla when the strategy cannot restore the snapshot")
	fl.BoolVar(&f.timing, "timing", false, "print where the time went on stdout, after the result (default: on stderr)")
	fl.BoolVar(&f.async, "async", false, "queue the invocation durably and print its id at once ('thaw async status ID'); it runs with the function's retries and destinations")
	fl.StringVar(&f.idem, "idempotency-key", "", "with --async: requests with the same key for the function are one invocation")
	fl.BoolVar(&f.logs, "logs", false, "print what the invocation wrote to stdout and stderr on stderr (with -o json or yaml: in the document)")
	_ = cmd.MarkFlagFilename("event-file", "json")
	return cmd
}

// invokeFlags are invoke's flags.
type invokeFlags struct {
	ev                     cli.EventFlags
	vm, snapshot, strategy string
	variant                string
	timeoutMS              int
	evict, strict, timing  bool
	async                  bool
	idem                   string
	logs                   bool
}

// invoke runs thaw invoke FUNCTION.
func (a *app) invoke(cmd *cobra.Command, function string, f *invokeFlags) error {
	if f.vm != "" && (f.strategy != "" || f.variant != "") {
		return cli.Usagef("--strategy and --variant are for cold invocations; they cannot be used with --vm (the VM is already running)")
	}
	if f.vm != "" && f.snapshot != "" {
		return cli.Usagef("--snapshot is for cold invocations; it cannot be used with --vm (the VM is already running)")
	}
	if cmd.Flags().Changed("event") && cmd.Flags().Changed("event-file") {
		return cli.Usagef("give the event with --event or --event-file, not both")
	}
	if f.timeoutMS < 0 {
		return cli.Usagef("--timeout-ms must be positive, got %d", f.timeoutMS)
	}
	event, err := f.ev.Read(a.App, cmd)
	if err != nil {
		return err
	}
	if f.vm != "" && (f.evict || f.strict) {
		return cli.Usagef("--evict-cache and --strict apply to cold invocations only (not with --vm)")
	}
	if f.async || f.idem != "" {
		return a.invokeAsync(function, event, f)
	}
	opts := client.InvokeOptions{
		Timeout:    time.Duration(f.timeoutMS) * time.Millisecond,
		Strategy:   f.strategy,
		Variant:    f.variant,
		Snapshot:   f.snapshot,
		EvictCache: f.evict,
		Strict:     f.strict,
		Logs:       f.logs,
	}
	var inv *client.Invocation
	if f.vm != "" {
		v, err := a.C.GetVM(a.Ctx, f.vm)
		if err != nil {
			return err
		}
		if v.Function != function {
			return fmt.Errorf("vm %s runs function %q, not %q", f.vm, v.Function, function)
		}
		inv, err = a.C.InvokeVM(a.Ctx, f.vm, event, opts)
		if err != nil {
			return err
		}
	} else {
		inv, err = a.C.InvokeFunction(a.Ctx, function, event, opts)
		if err != nil {
			return err
		}
	}
	if f.logs && !a.JSON {
		printInvocationLogs(a.Stderr, inv)
	}
	return a.printInvocation(inv, f.timing)
}

// invokeAsync queues the invocation (thaw invoke --async).
func (a *app) invokeAsync(function string, event []byte, f *invokeFlags) error {
	if !f.async {
		return cli.Usagef("--idempotency-key goes with --async")
	}
	if f.vm != "" || f.snapshot != "" || f.strategy != "" || f.variant != "" || f.timeoutMS != 0 || f.evict || f.strict || f.timing || f.logs {
		return cli.Usagef("--async takes an event only: not --vm, --snapshot, --strategy, --variant, --timeout-ms, --evict-cache, --strict, --timing or --logs")
	}
	acc, err := a.C.InvokeFunctionAsync(a.Ctx, function, event, f.idem)
	if err != nil {
		return err
	}
	return a.PrintAccepted(acc)
}

// printInvocation prints an invocation: warnings first (stderr), then
// its result on stdout and where the time went (stderr, or stdout with
// timing), or its error on stderr; a function error ends thaw with exit
// code 3.
func (a *app) printInvocation(inv *client.Invocation, timing bool) error {
	a.warnInvocation(inv)
	if a.JSON {
		if err := a.PrintJSON(inv); err != nil {
			return err
		}
		if !inv.OK {
			a.Report("function_error", fmt.Sprintf("function %s raised %s", inv.Function, funcErrorText(inv.Error)), "", "")
			return &cli.ExitCodeError{Code: cli.ExitFunction}
		}
		return nil
	}
	if inv.OK {
		fmt.Fprintf(a.Stdout, "%s\n", output.ResultJSON(inv.Result))
	}
	if timing || !a.Quiet {
		w := a.Stream(timing)
		if timing && inv.OK {
			fmt.Fprintln(w)
		}
		if err := a.printTiming(w, inv); err != nil {
			return err
		}
	}
	if inv.OK {
		return nil
	}
	fmt.Fprintf(a.Stderr, "thaw: function %s raised %s\n", termtext.Line(inv.Function), funcErrorLine(inv.Error))
	if inv.Error != nil {
		fmt.Fprint(a.Stderr, termtext.Indent(inv.Error.Traceback))
	}
	return &cli.ExitCodeError{Code: cli.ExitFunction}
}

// warnInvocation warns on stderr of what the invocation did that was not
// asked for: a strategy that fell back to vanilla, an older build of the
// version that was served.
func (a *app) warnInvocation(inv *client.Invocation) {
	if st := inv.StrategyStats; st != nil && st.Fallback != "" {
		requested, _, _ := strings.Cut(st.Fallback, " ")
		why := st.Fallback
		if _, after, ok := strings.Cut(why, "restored with vanilla: "); ok {
			why = after
		}
		a.Warn("strategy %s fell back to vanilla: %s (--strict refuses a fallback)", requested, why)
	}
	if b := inv.Timing.Build; b != nil {
		a.Warn("version %d is stale (%s); served from %s until it is rebuilt", inv.Version, b.Stale, map[string]string{
			"boot": "a boot", "snapshot": "its older snapshot"}[b.Served])
	}
}

// funcErrorText is a function error's type and message as the guest
// wrote them (for a document, which escapes them itself).
func funcErrorText(e *client.FunctionError) string {
	switch {
	case e == nil:
		return "an error (no details)"
	case e.Message == "":
		return e.Type
	}
	return e.Type + ": " + e.Message
}

// funcErrorLine is a function error's type and message, escaped: the
// guest wrote both (a message's further lines are marked, termtext.Inline).
func funcErrorLine(e *client.FunctionError) string {
	if e == nil {
		return "an error (no details)"
	}
	typ := termtext.Line(e.Type)
	if typ == "" {
		typ = "an error"
	}
	if e.Message == "" {
		return typ
	}
	return typ + ": " + termtext.Inline(e.Message)
}

// printTiming writes an invocation's headline and timing table to w.
func (a *app) printTiming(w0 io.Writer, inv *client.Invocation) error {
	how := inv.Mode
	if how == "" {
		how = "?"
	}
	if inv.Version > 0 {
		how += fmt.Sprintf(", version %d", inv.Version)
		if inv.Alias != "" {
			how += " (alias " + inv.Alias + ")"
		}
	}
	if inv.Snapshot != "" {
		how += ", snapshot " + inv.Snapshot
	}
	if inv.Strategy != "" {
		how += ", strategy " + inv.Strategy
	}
	fmt.Fprintf(w0, "invocation %s (%s) on vm %s\n", inv.ID, how, output.OrDash(inv.VM))
	w := output.NewTable(w0)
	t := inv.Timing
	if t.ImportMS > 0 {
		output.Row(w, "import", output.FmtMSCol(t.ImportMS), "function imported lazily from the registry first")
	}
	if t.Restore != nil {
		output.WriteRestoreTiming(w, "", t.Restore)
	}
	output.WriteReadyNote(w, t.Ready)
	output.Row(w, "invoke", output.FmtMSCol(t.InvokeMS), "request sent to reply received")
	output.Row(w, "  guest", output.FmtMSCol(t.GuestMS), "inside the handler")
	output.Row(w, "total", output.FmtMSCol(t.TotalMS), "request to answer")
	if t.TeardownMS > 0 {
		output.Row(w, "teardown", output.FmtMSCol(t.TeardownMS), "after the answer")
	}
	if p := inv.Process; p != nil {
		output.Row(w, "vmm faults", fmt.Sprintf("%d major, %d minor", p.MajorFaults, p.MinorFaults), "VMM process, resume to answer")
		output.Row(w, "vmm reads", output.FmtBytes(int64(p.ReadBytes)), "from storage, resume to answer")
	}
	if st := inv.StrategyStats; st != nil {
		if st.LayoutEntries > 0 {
			output.Row(w, "layout", fmt.Sprintf("%d mappings", st.LayoutEntries), "made by the interposer")
		}
		if st.Lazy {
			output.Row(w, "lazy", fmt.Sprintf("%d faults read %s; fetched %s in %d chunks", st.SourceFaults, output.FmtBytes(int64(st.SourceBytes)),
				output.FmtBytes(int64(st.SourceFetchedBytes)), st.SourceFetchedChunks), "memory from a source (the registry)")
			if st.LoadingSetFetchedChunks > 0 {
				output.Row(w, "", fmt.Sprintf("loading set fetched %s in %d chunks", output.FmtBytes(int64(st.LoadingSetFetchedBytes)), st.LoadingSetFetchedChunks), "streamed while the guest ran")
			}
		}
		a.WriteStrategyStats(w, st)
	}
	if inv.EvictedCache {
		output.Row(w, "cache", "evicted", "snapshot files dropped from the page cache first")
	}
	writeAdaptive(w, inv)
	return w.Flush()
}

// writeAdaptive adds how an invocation's strategy was chosen and how its
// guest used the recorded set to thaw invoke's table.
func writeAdaptive(w io.Writer, inv *client.Invocation) {
	if c := inv.StrategyChoice; c != nil && c.How != "request" {
		output.Row(w, "choice", c.How, c.Reason)
	}
	if st := inv.StrategyStats; st != nil && st.SetPages > 0 {
		output.Row(w, "set use", fmt.Sprintf("%d of %d pages touched, %d outside (%.0f%%), %d unused", st.SetTouchedPages, st.SetPages,
			st.SetOutsidePages, st.SetOutsideRatio*100, st.SetUnusedPages), "the strategy's recorded set against what the guest touched")
	}
}

// printInvocationLogs prints an invocation's logs on w (thaw invoke
// --logs): a headline of thaw's own, then the output and the kernel's
// messages escaped, under it.
func printInvocationLogs(w io.Writer, inv *client.Invocation) {
	l := inv.Logs
	if l == nil || l.Missing != "" && l.Output == "" && l.Kernel == "" {
		why := "the daemon sent none"
		if l != nil {
			why = l.Missing
		}
		fmt.Fprintf(w, "thaw: warning: no logs of %s: %s\n", termtext.Line(inv.ID), termtext.Inline(why))
		return
	}
	head := fmt.Sprintf("logs of %s", termtext.Line(inv.ID))
	if l.TraceID != "" {
		head += " (trace " + termtext.Line(l.TraceID) + ")"
	}
	switch {
	case l.OutputBytes == 0 && l.Kernel == "":
		fmt.Fprintf(w, "%s: nothing written\n", head)
		return
	case l.CutBytes > 0:
		head += fmt.Sprintf(" (%s written, %s of it cut: thawd --max-logs)", output.FmtBytes(l.OutputBytes), output.FmtBytes(l.CutBytes))
	}
	fmt.Fprintf(w, "%s:\n%s", head, termtext.Indent(l.Output))
	if l.Kernel != "" {
		fmt.Fprintf(w, "kernel messages:\n%s", termtext.Indent(l.Kernel))
	}
}
