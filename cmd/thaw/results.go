package main

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/thaw-dev/thaw/client"
)

// vmSource says where a VM came from: a boot or a snapshot.
func VMSource(v *client.VM) string {
	if v.Snapshot != "" {
		return v.Snapshot
	}
	return "boot"
}

// startupMS is how long a VM took to become ready: its boot, or its
// restore's setup and resume.
func StartupMS(v *client.VM) float64 {
	if v.Restore != nil {
		return v.Restore.SetupMS + v.Restore.ResumeMS
	}
	return v.BootMS
}

func (a *App) PrintVM(v *client.VM) error {
	if a.Quiet {
		a.QuietID(v.ID)
		return nil
	}
	err := a.PrintObject(v, "", "", func(w io.Writer) {
		Row(w, "ID:", v.ID)
		Row(w, "Function:", v.Function)
		Row(w, "State:", VMState(v))
		if v.IdleUntil != nil {
			Row(w, "Idle until:", FmtUntil(*v.IdleUntil)+" (kept for its function's next invocations; then stopped)")
		}
		if v.Reason != "" {
			Row(w, "Reason:", v.Reason)
		}
		if v.PID > 0 {
			Row(w, "PID:", fmt.Sprint(v.PID))
		}
		Row(w, "Memory:", FmtMiB(v.MemoryMiB))
		Row(w, "Accel:", OrDash(v.Accel))
		if v.Snapshot != "" {
			Row(w, "Snapshot:", v.Snapshot)
			Row(w, "Strategy:", OrDash(v.Strategy))
		}
		if v.BootMS > 0 {
			Row(w, "Boot:", FmtMS(v.BootMS))
		}
		Row(w, "Run dir:", OrDash(v.RunDir))
		Row(w, "Created:", FmtTime(v.CreatedAt))
		Row(w, "Updated:", FmtTime(v.UpdatedAt))
	})
	if err != nil || a.JSON || v.Restore == nil {
		return err
	}
	fmt.Fprintln(a.Stdout, "\nRestore:")
	w := NewTable(a.Stdout)
	WriteRestoreTiming(w, "  ", v.Restore)
	Row(w, "  ready", FmtMSCol(v.Restore.SetupMS+v.Restore.ResumeMS), "setup + resume")
	return w.Flush()
}

func (a *App) PrintPrepare(res *client.PrepareResult) error {
	w := NewTable(a.Stdout)
	Row(w, "Function:", res.Function)
	if res.Clean != nil {
		Row(w, "Clean snapshot:", res.Clean.ID)
	}
	if res.Warm != nil {
		Row(w, "Warm snapshot:", res.Warm.ID, "(cold invocations restore this one)")
	}
	for _, k := range slices.Sorted(maps.Keys(res.Prepared)) {
		p := res.Prepared[k]
		if p == nil {
			continue
		}
		if p.Unavailable != "" {
			Row(w, k+":", "not prepared: "+p.Unavailable)
			continue
		}
		Row(w, k+":", fmt.Sprintf("recorded in %s, built in %s", FmtMS(p.RecordMS), FmtMS(p.BuildMS)))
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
	Row(w, "Took:", FmtMS(res.Timing.TotalMS))
	return w.Flush()
}

// printStored prints a snapshot's entry in the memory store.
func (a *App) PrintStored(e *client.StoreEntry) error {
	switch {
	case a.JSON:
		return a.PrintJSON(e)
	case a.Quiet:
		a.QuietID(e.Snapshot)
		return nil
	}
	fmt.Fprintf(a.Stdout, "stored %s: %s of %s guest memory in %d regions (%s)\n",
		e.Snapshot, FmtBytes(e.Bytes), FmtBytes(e.Size), e.Regions, FmtMS(e.StoredMS))
	return nil
}

// snapshotPrinter prints a snapshot, after a headline saying what happened
// to it if there is one.
func (a *App) SnapshotPrinter(headline string) func(*client.Snapshot) error {
	return func(s *client.Snapshot) error {
		return a.PrintObject(s, headline, s.ID, func(w io.Writer) {
			Row(w, "ID:", s.ID)
			Row(w, "Function:", s.Function)
			Row(w, "Source VM:", OrDash(s.SourceVM))
			mem := FmtMiB(s.MemoryMiB)
			if s.Memory == client.MemoryRemote {
				mem += " (lazy: in the registry, fetched on demand)"
			}
			Row(w, "Memory:", mem)
			Row(w, "Size:", FmtBytes(s.SizeBytes))
			Row(w, "Disk:", FmtBytes(s.DiskBytes))
			Row(w, "Create:", FmtMS(s.CreateMS))
			Row(w, "Pause:", FmtMS(s.PauseMS))
			Row(w, "Dir:", OrDash(s.Dir))
			Row(w, "Created:", FmtTime(s.CreatedAt))
		})
	}
}

func (a *App) PrintPush(r *client.PushResult) error {
	return a.PrintObject(r, "pushed snapshot", r.Snapshot, func(w io.Writer) {
		Row(w, "Function:", r.Function)
		Row(w, "Chunks:", fmt.Sprintf("%d of %s (non-zero)", r.Chunks, FmtBytes(r.ChunkSize)))
		Row(w, "Uploaded:", fmt.Sprintf("%d chunks, %s (the rest were in the registry)", r.Uploaded, FmtBytes(r.UploadedBytes)))
		Row(w, "Stored:", fmt.Sprintf("%s compressed of %s", FmtBytes(r.StoredBytes), FmtBytes(r.DataBytes)))
		Row(w, "Took:", FmtMS(r.PushMS))
	})
}

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
	w := NewTable(a.Stdout)
	if r.FunctionCreated {
		Row(w, "Function:", r.Snapshot.Function+" (created from the registry)")
	}
	if r.Completed {
		Row(w, "Completed:", "its memory was in the registry and is now local")
	}
	Row(w, "Fetched:", fmt.Sprintf("%d chunks, %s", r.FetchedChunks, FmtBytes(r.FetchedBytes)))
	Row(w, "From cache:", fmt.Sprintf("%d chunks", r.CachedChunks))
	Row(w, "Took:", FmtMS(r.PullMS))
	return w.Flush()
}

func (a *App) PrintGC(r *client.GCResult) error {
	what := "collected"
	if r.DryRun {
		what = "dry run, nothing deleted"
	}
	if a.Quiet {
		return nil
	}
	return a.PrintObject(r, "registry", what, func(w io.Writer) {
		Row(w, "Read:", fmt.Sprintf("%d snapshots, %d functions, %d chunks", r.Snapshots, r.Functions, r.Chunks))
		Row(w, "Deleted:", fmt.Sprintf("%d chunks, %d code archives, %s", r.ChunksDeleted, r.CodeDeleted, FmtBytes(r.BytesDeleted)))
		Row(w, "Kept:", fmt.Sprintf("%s (%d unused chunks within the grace)", FmtBytes(r.BytesKept), r.ChunksYoung))
		if r.StaleLeases > 0 {
			Row(w, "Stale leases:", fmt.Sprintf("%d removed (writers that died)", r.StaleLeases))
		}
		Row(w, "Took:", FmtMS(r.GCMS))
	})
}

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
		Row(w, "Version:", fmt.Sprint(d.Version))
		Row(w, "Digest:", ShortDigest(d.Digest))
		if len(d.Snapshots) > 0 {
			Row(w, "Snapshots:", strings.Join(d.Snapshots, ", "))
		}
		if !d.Unchanged {
			t := d.Timing
			Row(w, "Took:", fmt.Sprintf("%s (build %s, boot %s, snapshot %s%s)", FmtMS(t.TotalMS), FmtMS(t.BuildMS),
				FmtMS(t.BootMS), FmtMS(t.SnapshotMS), map[bool]string{true: ", prepare " + FmtMS(t.PrepareMS)}[t.PrepareMS > 0]))
		}
	})
}

// printRefresh prints a working-set refresh.
func (a *App) PrintRefresh(r *client.WorkingSetRefresh) error {
	return a.PrintObject(r, "refreshed working sets of", r.Snapshot, func(w io.Writer) {
		Row(w, "Operation:", r.Operation)
		Row(w, "State:", r.State)
		Row(w, "Input:", r.Source)
		for _, s := range r.Sets {
			Row(w, s.Strategy+":", fmt.Sprintf("%d -> %d pages (%s -> %s)", s.PagesBefore, s.PagesAfter, FmtBytes(s.BytesBefore), FmtBytes(s.BytesAfter)))
		}
		if r.Error != "" {
			Row(w, "Error:", r.Error)
		}
	})
}

// printAccepted prints a queued invocation's id (its document with --json).
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
