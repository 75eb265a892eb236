package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// REAP records the pages the first invocation faults (userfaultfd) and
// later installs them all from a compact working-set file, read with one
// O_DIRECT read, before the vCPU runs (ASPLOS'21).
const REAP Kind = "reap"

// REAP's artifact files (memlayout.WriteREAP).
const (
	REAPManifest       = "reap.json"
	REAPWorkingSetFile = "ws.bin"
)

// REAPStats: the working-set install and the faults served after it.
type REAPStats struct {
	PrefetchPages    uint64  `json:"prefetch_pages,omitempty" unit:"pages" desc:"working set installed before the vCPU ran"`
	PrefetchBytes    uint64  `json:"prefetch_bytes,omitempty" unit:"bytes" desc:"working-set file read"`
	PrefetchMS       float64 `json:"prefetch_ms,omitempty" unit:"ms" desc:"working-set read and install"`
	FaultsServed     uint64  `json:"faults_served,omitempty" unit:"count" desc:"uffd faults served outside the working set"`
	FaultBytesRead   uint64  `json:"fault_bytes_read,omitempty" unit:"bytes" desc:"memory file reads for those faults"`
	PrefetchDirectIO bool    `json:"prefetch_direct_io,omitempty" desc:"the working set was read with O_DIRECT"`
}

// REAPBuild summarizes the REAP record phase and artifacts.
type REAPBuild struct {
	FaultedPages    int   `json:"faulted_pages" unit:"pages" desc:"pages the record invocation faulted"`
	WorkingSetBytes int64 `json:"working_set_bytes" unit:"bytes" desc:"the working-set file"`
}

// beginREAP installs the working set before the vCPU runs; other faults
// are served from the memory file, or from the memory source.
func beginREAP(_ context.Context, snap Snapshot, env Env) (Session, error) {
	art, ws, err := verifiedArtifact(snap, REAP, memlayout.ReadREAP, REAPWorkingSetFile)
	if err != nil {
		return nil, err
	}
	plan := uffdPlan{kind: REAP, wsFile: ws, wsPages: art.PageOrder(), source: newPageSource(snap.Source)}
	if w := snap.remote(REAP, REAPWorkingSetFile); w != nil {
		if want := int64(len(plan.wsPages)) * snapshot.PageSize; w.Size() != want {
			return nil, fmt.Errorf("working-set source holds %d bytes, the artifact names %d", w.Size(), want)
		}
		// Remote: fetched from now on with parallel GETs while QEMU
		// starts; installed once QEMU has registered guest memory.
		w.Prefetch(context.Background(), 0, w.Size())
		plan.wsSource = w
	}
	return startUffd(snap, env, plan)
}

// recordREAP is REAP's record phase on the warm snapshot: every page fault
// of one record invocation is served through userfaultfd and recorded in
// order; the pages go to the working-set file.
func recordREAP(ctx context.Context, h RecordHost, p *Prepare) error {
	t := time.Now()
	faulted, err := recordFaults(ctx, h, p.Warm)
	if err != nil {
		return err
	}
	p.Touched = faulted
	p.Step(REAP).RecordMS = msOf(time.Since(t))
	t = time.Now()
	dir := p.Warm.ArtifactDir(REAP)
	art, err := memlayout.WriteREAP(dir, p.Warm.MemoryPath(), memSHA(p.Warm), faulted)
	if err != nil {
		return fmt.Errorf("build artifacts: %w", err)
	}
	if err := art.Verify(memSize(p.Warm), memSHA(p.Warm), true); err != nil {
		return fmt.Errorf("verify artifacts: %w", err)
	}
	ws := filepath.Join(dir, REAPWorkingSetFile)
	_ = snapshot.Trust(ws)
	b := &REAPBuild{FaultedPages: len(faulted)}
	if st, err := os.Stat(ws); err == nil {
		b.WorkingSetBytes = st.Size()
	}
	p.SetBuild(REAP, b)
	p.Step(REAP).BuildMS = msOf(time.Since(t))
	return nil
}

var reapStrategy = Strategy{Kind: REAP, Begin: beginREAP, Fallback: true, Record: recordREAP, Lazy: true, Auto: true, AutoOrder: 2,
	Ready: hasArtifact(REAP, REAPManifest), Refresh: refreshREAP, RemoteDefault: true, Prefetched: reapPrefetched,
	Artifacts: []Artifact{{Name: REAPManifest, Required: true}, {Name: REAPWorkingSetFile, Required: true, Remote: true, Streamed: true}},
	StatsPart: REAPStats{}, BuildPart: REAPBuild{}}

// reapPrefetched is the working set a lazy REAP restore installs before
// the guest runs: the runs of the manifest in dir (no verification; the
// registry's measurements read it).
func reapPrefetched(dir string) (int64, [][2]int64, error) {
	art, err := memlayout.ReadREAP(dir)
	if err != nil {
		return 0, nil, err
	}
	runs := make([][2]int64, len(art.Pages))
	for i, r := range art.Pages {
		runs[i] = [2]int64{int64(r.Start), int64(r.Pages)}
	}
	return int64(art.PageSize), runs, nil
}
