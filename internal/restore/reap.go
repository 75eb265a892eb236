package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/wire"
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
type REAPStats = wire.REAPStats

// beginREAP installs the working set before the vCPU runs; other faults
// are served from the memory file, or from the memory source.
func beginREAP(_ context.Context, snap Snapshot, env Env) (Session, error) {
	art, ws, err := verifiedArtifact(snap, REAP, memlayout.ReadREAP, REAPWorkingSetFile)
	if err != nil {
		return nil, err
	}
	plan := uffdPlan{kind: REAP, wsFile: ws, wsPages: art.PageOrder(), source: newPageSource(snap.Source)}
	if w := snap.WorkingSet; w != nil {
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
	p.Result.Timing.REAPRecordMS = msOf(time.Since(t))
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
	p.Result.REAP = &wire.REAPBuild{FaultedPages: len(faulted)}
	if st, err := os.Stat(ws); err == nil {
		p.Result.REAP.WorkingSetBytes = st.Size()
	}
	p.Result.Timing.REAPBuildMS = msOf(time.Since(t))
	return nil
}
