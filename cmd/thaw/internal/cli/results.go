package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// The documents of operations' results: the command that starts an
// operation prints its result, and so does thaw operation wait.

// VMSource says where a VM came from: a boot or a snapshot.
func VMSource(v *client.VM) string {
	if v.Snapshot != "" {
		return v.Snapshot
	}
	return "boot"
}

// StartupMS is how long a VM took to become ready: its boot, or its
// restore's setup and resume.
func StartupMS(v *client.VM) float64 {
	if v.Restore != nil {
		return v.Restore.SetupMS + v.Restore.ResumeMS
	}
	return v.BootMS
}

// PrintVM prints a VM (thaw vm get, and a boot's or restore's result).
func (a *App) PrintVM(v *client.VM) error {
	if a.Quiet {
		a.QuietID(v.ID)
		return nil
	}
	err := a.PrintObject(v, "", "", func(w io.Writer) {
		output.Row(w, "ID:", v.ID)
		output.Row(w, "Function:", v.Function)
		output.Row(w, "State:", output.VMState(v))
		if v.IdleUntil != nil {
			output.Row(w, "Idle until:", output.FmtUntil(*v.IdleUntil)+" (kept for its function's next invocations; then stopped)")
		}
		if v.Reason != "" {
			output.Row(w, "Reason:", v.Reason)
		}
		if v.PID > 0 {
			output.Row(w, "PID:", fmt.Sprint(v.PID))
		}
		output.Row(w, "Memory:", output.FmtMiB(v.MemoryMiB))
		if v.ReadyMemoryMiB > 0 {
			output.Row(w, "Standby memory:", output.FmtMiB(v.ReadyMemoryMiB)+" (what this ready clone counts against --standby-memory)")
		}
		output.Row(w, "Accel:", output.OrDash(v.Accel))
		if v.Snapshot != "" {
			output.Row(w, "Snapshot:", v.Snapshot)
			output.Row(w, "Strategy:", output.OrDash(v.Strategy))
		}
		if v.BootMS > 0 {
			output.Row(w, "Boot:", output.FmtMS(v.BootMS))
		}
		output.Row(w, "Run dir:", output.OrDash(v.RunDir))
		output.Row(w, "Created:", output.FmtTime(v.CreatedAt))
		output.Row(w, "Updated:", output.FmtTime(v.UpdatedAt))
	})
	if err != nil || a.JSON || v.Restore == nil {
		return err
	}
	fmt.Fprintln(a.Stdout, "\nRestore:")
	w := output.NewTable(a.Stdout)
	output.WriteRestoreTiming(w, "  ", v.Restore)
	output.Row(w, "  ready", output.FmtMSCol(v.Restore.SetupMS+v.Restore.ResumeMS), "setup + resume")
	return w.Flush()
}

// PrintPrepare prints what thaw prepare did for each strategy.
func (a *App) PrintPrepare(res *client.PrepareResult) error {
	w := output.NewTable(a.Stdout)
	output.Row(w, "Function:", res.Function)
	if res.Clean != nil {
		output.Row(w, "Clean snapshot:", res.Clean.ID)
	}
	if res.Warm != nil {
		output.Row(w, "Warm snapshot:", res.Warm.ID, "(cold invocations restore this one)")
	}
	for _, k := range slices.Sorted(maps.Keys(res.Prepared)) {
		p := res.Prepared[k]
		if p == nil {
			continue
		}
		if p.Unavailable != "" {
			output.Row(w, k+":", "not prepared: "+p.Unavailable)
			continue
		}
		output.Row(w, k+":", fmt.Sprintf("recorded in %s, built in %s", output.FmtMS(p.RecordMS), output.FmtMS(p.BuildMS)))
		var vals map[string]any
		if json.Unmarshal(p.Build, &vals) != nil {
			continue
		}
		var ms []client.Measure
		if d := a.strategyDetails(k); d != nil {
			ms = d.Prepared
		}
		writeMeasures(w, " ", flatScalars(vals), ms)
	}
	output.Row(w, "Took:", output.FmtMS(res.Timing.TotalMS))
	return w.Flush()
}

// PrintStored prints a snapshot's entry in the memory store.
func (a *App) PrintStored(e *client.StoreEntry) error {
	switch {
	case a.JSON:
		return a.PrintJSON(e)
	case a.Quiet:
		a.QuietID(e.Snapshot)
		return nil
	}
	fmt.Fprintf(a.Stdout, "stored %s: %s of %s guest memory in %d regions (%s)\n",
		e.Snapshot, output.FmtBytes(e.Bytes), output.FmtBytes(e.Size), e.Regions, output.FmtMS(e.StoredMS))
	return nil
}

// SnapshotPrinter prints a snapshot, after a headline saying what happened
// to it if there is one.
func (a *App) SnapshotPrinter(headline string) func(*client.Snapshot) error {
	return func(s *client.Snapshot) error {
		return a.PrintObject(s, headline, s.ID, func(w io.Writer) {
			output.Row(w, "ID:", s.ID)
			output.Row(w, "Function:", s.Function)
			output.Row(w, "Source VM:", output.OrDash(s.SourceVM))
			mem := output.FmtMiB(s.MemoryMiB)
			if s.Memory == client.MemoryRemote {
				mem += " (lazy: in the registry, fetched on demand)"
			}
			output.Row(w, "Memory:", mem)
			output.Row(w, "Size:", output.FmtBytes(s.SizeBytes))
			output.Row(w, "Disk:", output.FmtBytes(s.DiskBytes))
			output.Row(w, "Create:", output.FmtMS(s.CreateMS))
			output.Row(w, "Pause:", output.FmtMS(s.PauseMS))
			output.Row(w, "Dir:", output.OrDash(s.Dir))
			output.Row(w, "Created:", output.FmtTime(s.CreatedAt))
		})
	}
}

// PrintPush prints what a snapshot push sent to the registry.
func (a *App) PrintPush(r *client.PushResult) error {
	return a.PrintObject(r, "pushed snapshot", r.Snapshot, func(w io.Writer) {
		output.Row(w, "Function:", r.Function)
		output.Row(w, "Chunks:", fmt.Sprintf("%d of %s (non-zero)", r.Chunks, output.FmtBytes(r.ChunkSize)))
		output.Row(w, "Uploaded:", fmt.Sprintf("%d chunks, %s (the rest were in the registry)", r.Uploaded, output.FmtBytes(r.UploadedBytes)))
		output.Row(w, "Stored:", fmt.Sprintf("%s compressed of %s", output.FmtBytes(r.StoredBytes), output.FmtBytes(r.DataBytes)))
		output.Row(w, "Took:", output.FmtMS(r.PushMS))
	})
}

// PrintPull prints what a snapshot pull brought from the registry.
func (a *App) PrintPull(r *client.PullResult) error {
	switch {
	case a.JSON:
		return a.PrintJSON(r)
	case a.Quiet:
		a.QuietID(r.Snapshot.ID)
		return nil
	}
	if err := a.SnapshotPrinter("pulled snapshot")(r.Snapshot); err != nil {
		return err
	}
	w := output.NewTable(a.Stdout)
	if r.FunctionCreated {
		output.Row(w, "Function:", r.Snapshot.Function+" (created from the registry)")
	}
	if r.Completed {
		output.Row(w, "Completed:", "its memory was in the registry and is now local")
	}
	output.Row(w, "Fetched:", fmt.Sprintf("%d chunks, %s", r.FetchedChunks, output.FmtBytes(r.FetchedBytes)))
	output.Row(w, "From cache:", fmt.Sprintf("%d chunks", r.CachedChunks))
	output.Row(w, "Took:", output.FmtMS(r.PullMS))
	return w.Flush()
}

// PrintGC prints what a collection of the registry's garbage removed.
func (a *App) PrintGC(r *client.GCResult) error {
	what := "collected"
	if r.DryRun {
		what = "dry run, nothing deleted"
	}
	if a.Quiet {
		return nil
	}
	return a.PrintObject(r, "registry", what, func(w io.Writer) {
		output.Row(w, "Read:", fmt.Sprintf("%d snapshots, %d functions, %d chunks", r.Snapshots, r.Functions, r.Chunks))
		output.Row(w, "Deleted:", fmt.Sprintf("%d chunks, %d code archives, %s", r.ChunksDeleted, r.CodeDeleted, output.FmtBytes(r.BytesDeleted)))
		output.Row(w, "Kept:", fmt.Sprintf("%s (%d unused chunks within the grace)", output.FmtBytes(r.BytesKept), r.ChunksYoung))
		if r.StaleLeases > 0 {
			output.Row(w, "Stale leases:", fmt.Sprintf("%d removed (writers that died)", r.StaleLeases))
		}
		output.Row(w, "Took:", output.FmtMS(r.GCMS))
	})
}

// PrintDeploy prints a deploy: the version it made and whether it is live.
func (a *App) PrintDeploy(d *client.Deploy) error {
	if a.Quiet {
		a.QuietID(fmt.Sprintf("%s:%d", d.Function, d.Version))
		return nil
	}
	headline := fmt.Sprintf("deployed %s version %d", d.Function, d.Version)
	switch {
	case d.Unchanged:
		headline = fmt.Sprintf("%s version %d has this content already: nothing changed", d.Function, d.Version)
	case d.Promoted:
		headline += " (live)"
	default:
		headline += " (not promoted: invoke it as " + d.Function + ":" + fmt.Sprint(d.Version) + ")"
	}
	return a.PrintObject(d, headline, "", func(w io.Writer) {
		output.Row(w, "Version:", fmt.Sprint(d.Version))
		output.Row(w, "Digest:", output.ShortDigest(d.Digest))
		if len(d.Snapshots) > 0 {
			output.Row(w, "Snapshots:", strings.Join(d.Snapshots, ", "))
		}
		if !d.Unchanged {
			t := d.Timing
			output.Row(w, "Took:", fmt.Sprintf("%s (build %s, boot %s, snapshot %s%s)", output.FmtMS(t.TotalMS), output.FmtMS(t.BuildMS),
				output.FmtMS(t.BootMS), output.FmtMS(t.SnapshotMS), map[bool]string{true: ", prepare " + output.FmtMS(t.PrepareMS)}[t.PrepareMS > 0]))
		}
	})
}

// PrintRefresh prints a working-set refresh.
func (a *App) PrintRefresh(r *client.WorkingSetRefresh) error {
	return a.PrintObject(r, "refreshed working sets of", r.Snapshot, func(w io.Writer) {
		output.Row(w, "Operation:", r.Operation)
		output.Row(w, "State:", r.State)
		output.Row(w, "Input:", r.Source)
		for _, s := range r.Sets {
			output.Row(w, s.Strategy+":", fmt.Sprintf("%d -> %d pages (%s -> %s)", s.PagesBefore, s.PagesAfter, output.FmtBytes(s.BytesBefore), output.FmtBytes(s.BytesAfter)))
		}
		if r.Error != "" {
			output.Row(w, "Error:", r.Error)
		}
	})
}

// PrintAccepted prints a queued invocation's id (its document with --json).
func (a *App) PrintAccepted(acc *client.AsyncAccepted) error {
	if a.JSON {
		return a.PrintJSON(acc)
	}
	fmt.Fprintln(a.Stdout, acc.ID)
	if acc.Duplicate {
		fmt.Fprintln(a.Stderr, "thaw: an earlier request with this idempotency key queued it; nothing new was queued")
	}
	return nil
}
