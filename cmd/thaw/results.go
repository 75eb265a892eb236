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
func vmSource(v *client.VM) string {
	if v.Snapshot != "" {
		return v.Snapshot
	}
	return "boot"
}

// startupMS is how long a VM took to become ready: its boot, or its
// restore's setup and resume.
func startupMS(v *client.VM) float64 {
	if v.Restore != nil {
		return v.Restore.SetupMS + v.Restore.ResumeMS
	}
	return v.BootMS
}

func (a *app) printVM(v *client.VM) error {
	if a.quiet {
		a.quietID(v.ID)
		return nil
	}
	err := a.printObject(v, "", "", func(w io.Writer) {
		row(w, "ID:", v.ID)
		row(w, "Function:", v.Function)
		row(w, "State:", vmState(v))
		if v.IdleUntil != nil {
			row(w, "Idle until:", fmtUntil(*v.IdleUntil)+" (kept for its function's next invocations; then stopped)")
		}
		if v.Reason != "" {
			row(w, "Reason:", v.Reason)
		}
		if v.PID > 0 {
			row(w, "PID:", fmt.Sprint(v.PID))
		}
		row(w, "Memory:", fmtMiB(v.MemoryMiB))
		row(w, "Accel:", orDash(v.Accel))
		if v.Snapshot != "" {
			row(w, "Snapshot:", v.Snapshot)
			row(w, "Strategy:", orDash(v.Strategy))
		}
		if v.BootMS > 0 {
			row(w, "Boot:", fmtMS(v.BootMS))
		}
		row(w, "Run dir:", orDash(v.RunDir))
		row(w, "Created:", fmtTime(v.CreatedAt))
		row(w, "Updated:", fmtTime(v.UpdatedAt))
	})
	if err != nil || a.json || v.Restore == nil {
		return err
	}
	fmt.Fprintln(a.stdout, "\nRestore:")
	w := newTable(a.stdout)
	writeRestoreTiming(w, "  ", v.Restore)
	row(w, "  ready", fmtMSCol(v.Restore.SetupMS+v.Restore.ResumeMS), "setup + resume")
	return w.Flush()
}

func (a *app) printPrepare(res *client.PrepareResult) error {
	w := newTable(a.stdout)
	row(w, "Function:", res.Function)
	if res.Clean != nil {
		row(w, "Clean snapshot:", res.Clean.ID)
	}
	if res.Warm != nil {
		row(w, "Warm snapshot:", res.Warm.ID, "(cold invocations restore this one)")
	}
	for _, k := range slices.Sorted(maps.Keys(res.Prepared)) {
		p := res.Prepared[k]
		if p == nil {
			continue
		}
		if p.Unavailable != "" {
			row(w, k+":", "not prepared: "+p.Unavailable)
			continue
		}
		row(w, k+":", fmt.Sprintf("recorded in %s, built in %s", fmtMS(p.RecordMS), fmtMS(p.BuildMS)))
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
	row(w, "Took:", fmtMS(res.Timing.TotalMS))
	return w.Flush()
}

// printStored prints a snapshot's entry in the memory store.
func (a *app) printStored(e *client.StoreEntry) error {
	switch {
	case a.json:
		return a.printJSON(e)
	case a.quiet:
		a.quietID(e.Snapshot)
		return nil
	}
	fmt.Fprintf(a.stdout, "stored %s: %s of %s guest memory in %d regions (%s)\n",
		e.Snapshot, fmtBytes(e.Bytes), fmtBytes(e.Size), e.Regions, fmtMS(e.StoredMS))
	return nil
}

// snapshotPrinter prints a snapshot, after a headline saying what happened
// to it if there is one.
func (a *app) snapshotPrinter(headline string) func(*client.Snapshot) error {
	return func(s *client.Snapshot) error {
		return a.printObject(s, headline, s.ID, func(w io.Writer) {
			row(w, "ID:", s.ID)
			row(w, "Function:", s.Function)
			row(w, "Source VM:", orDash(s.SourceVM))
			mem := fmtMiB(s.MemoryMiB)
			if s.Memory == client.MemoryRemote {
				mem += " (lazy: in the registry, fetched on demand)"
			}
			row(w, "Memory:", mem)
			row(w, "Size:", fmtBytes(s.SizeBytes))
			row(w, "Disk:", fmtBytes(s.DiskBytes))
			row(w, "Create:", fmtMS(s.CreateMS))
			row(w, "Pause:", fmtMS(s.PauseMS))
			row(w, "Dir:", orDash(s.Dir))
			row(w, "Created:", fmtTime(s.CreatedAt))
		})
	}
}

func (a *app) printPush(r *client.PushResult) error {
	return a.printObject(r, "pushed snapshot", r.Snapshot, func(w io.Writer) {
		row(w, "Function:", r.Function)
		row(w, "Chunks:", fmt.Sprintf("%d of %s (non-zero)", r.Chunks, fmtBytes(r.ChunkSize)))
		row(w, "Uploaded:", fmt.Sprintf("%d chunks, %s (the rest were in the registry)", r.Uploaded, fmtBytes(r.UploadedBytes)))
		row(w, "Stored:", fmt.Sprintf("%s compressed of %s", fmtBytes(r.StoredBytes), fmtBytes(r.DataBytes)))
		row(w, "Took:", fmtMS(r.PushMS))
	})
}

func (a *app) printPull(r *client.PullResult) error {
	switch {
	case a.json:
		return a.printJSON(r)
	case a.quiet:
		a.quietID(r.Snapshot.ID)
		return nil
	}
	if err := a.snapshotPrinter("pulled snapshot")(r.Snapshot); err != nil {
		return err
	}
	w := newTable(a.stdout)
	if r.FunctionCreated {
		row(w, "Function:", r.Snapshot.Function+" (created from the registry)")
	}
	if r.Completed {
		row(w, "Completed:", "its memory was in the registry and is now local")
	}
	row(w, "Fetched:", fmt.Sprintf("%d chunks, %s", r.FetchedChunks, fmtBytes(r.FetchedBytes)))
	row(w, "From cache:", fmt.Sprintf("%d chunks", r.CachedChunks))
	row(w, "Took:", fmtMS(r.PullMS))
	return w.Flush()
}

func (a *app) printGC(r *client.GCResult) error {
	what := "collected"
	if r.DryRun {
		what = "dry run, nothing deleted"
	}
	if a.quiet {
		return nil
	}
	return a.printObject(r, "registry", what, func(w io.Writer) {
		row(w, "Read:", fmt.Sprintf("%d snapshots, %d functions, %d chunks", r.Snapshots, r.Functions, r.Chunks))
		row(w, "Deleted:", fmt.Sprintf("%d chunks, %d code archives, %s", r.ChunksDeleted, r.CodeDeleted, fmtBytes(r.BytesDeleted)))
		row(w, "Kept:", fmt.Sprintf("%s (%d unused chunks within the grace)", fmtBytes(r.BytesKept), r.ChunksYoung))
		if r.StaleLeases > 0 {
			row(w, "Stale leases:", fmt.Sprintf("%d removed (writers that died)", r.StaleLeases))
		}
		row(w, "Took:", fmtMS(r.GCMS))
	})
}

func (a *app) printDeploy(d *client.Deploy) error {
	if a.quiet {
		a.quietID(fmt.Sprintf("%s:%d", d.Function, d.Version))
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
	return a.printObject(d, headline, "", func(w io.Writer) {
		row(w, "Version:", fmt.Sprint(d.Version))
		row(w, "Digest:", shortDigest(d.Digest))
		if len(d.Snapshots) > 0 {
			row(w, "Snapshots:", strings.Join(d.Snapshots, ", "))
		}
		if !d.Unchanged {
			t := d.Timing
			row(w, "Took:", fmt.Sprintf("%s (build %s, boot %s, snapshot %s%s)", fmtMS(t.TotalMS), fmtMS(t.BuildMS),
				fmtMS(t.BootMS), fmtMS(t.SnapshotMS), map[bool]string{true: ", prepare " + fmtMS(t.PrepareMS)}[t.PrepareMS > 0]))
		}
	})
}

// printRefresh prints a working-set refresh.
func (a *app) printRefresh(r *client.WorkingSetRefresh) error {
	return a.printObject(r, "refreshed working sets of", r.Snapshot, func(w io.Writer) {
		row(w, "Operation:", r.Operation)
		row(w, "State:", r.State)
		row(w, "Input:", r.Source)
		for _, s := range r.Sets {
			row(w, s.Strategy+":", fmt.Sprintf("%d -> %d pages (%s -> %s)", s.PagesBefore, s.PagesAfter, fmtBytes(s.BytesBefore), fmtBytes(s.BytesAfter)))
		}
		if r.Error != "" {
			row(w, "Error:", r.Error)
		}
	})
}

// printAccepted prints a queued invocation's id (its document with --json).
func (a *app) printAccepted(acc *client.AsyncAccepted) error {
	if a.json {
		return a.printJSON(acc)
	}
	fmt.Fprintln(a.stdout, acc.ID)
	if acc.Duplicate {
		fmt.Fprintln(a.stderr, "thaw: an earlier request with this idempotency key queued it; nothing new was queued")
	}
	return nil
}
