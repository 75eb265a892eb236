package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/memlayout"
	capture "github.com/thaw-dev/thaw/internal/snapbpf"
)

// Working sets that follow the inputs: each strategy with a recorded set
// records it again on the warm snapshot it restores (Strategy.Refresh),
// into a directory the daemon then swaps in whole (docs/design.md).

// hasArtifact is Ready for a strategy whose manifest file is in its
// artifact directory.
func hasArtifact(k Kind, manifest string) func(Snapshot, Env) bool {
	return func(snap Snapshot, _ Env) bool {
		st, err := os.Stat(filepath.Join(snap.ArtifactDir(k), manifest))
		return err == nil && st.Mode().IsRegular()
	}
}

// storedCopy is premap's Ready: the memory store holds the snapshot.
func storedCopy(snap Snapshot, env Env) bool {
	if env.Store == nil || snap.Manifest == nil {
		return false
	}
	e, err := env.Store.Get(snap.Manifest.ID)
	return err == nil && e.Size == memSize(snap) && e.SHA256 == memSHA(snap)
}

// refreshREAP records the guest's faults during one invocation on snap
// (REAP's record phase) and writes the working set to dir.
func refreshREAP(ctx context.Context, h RecordHost, snap Snapshot, dir string, _ RecordOptions) (RefreshBuild, error) {
	faulted, err := recordFaults(ctx, h, snap)
	if err != nil {
		return RefreshBuild{}, err
	}
	art, err := memlayout.WriteREAP(dir, snap.MemoryPath(), memSHA(snap), faulted)
	if err != nil {
		return RefreshBuild{}, fmt.Errorf("build artifacts: %w", err)
	}
	if err := art.Verify(memSize(snap), memSHA(snap), true); err != nil {
		return RefreshBuild{}, fmt.Errorf("verify artifacts: %w", err)
	}
	return buildOf(uint64(len(art.PageOrder())), filepath.Join(dir, REAPWorkingSetFile))
}

// recordFaults restores snap with every fault served through userfaultfd
// and recorded, runs the host's record input once and returns the faulted
// pages in order.
func recordFaults(ctx context.Context, h RecordHost, snap Snapshot) ([]uint64, error) {
	var rec *uffdSession
	vm, err := h.Restore(ctx, snap, localOnly(func(_ context.Context, snap Snapshot, env Env) (Session, error) {
		var err error
		rec, err = startUffd(snap, env, uffdPlan{kind: REAP, record: true})
		return rec, err
	}))
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	if err := vm.Invoke(ctx); err != nil {
		return nil, err
	}
	return rec.recordedPages(), nil
}

// refreshFaaSnap records the pages that come into the page cache while
// snap's guest runs the record input (FaaSnap's host page recording,
// readahead held off as in its prepare) and builds the loading set of
// snap's own memory from them, with the group size and merge gap of the
// artifact it replaces.
func refreshFaaSnap(ctx context.Context, h RecordHost, snap Snapshot, dir string, _ RecordOptions) (RefreshBuild, error) {
	old, err := memlayout.ReadFaaSnap(snap.ArtifactDir(FaaSnap))
	if err != nil {
		return RefreshBuild{}, fmt.Errorf("the artifact to refresh: %w", err)
	}
	var rec *faasnapRecord
	vm, err := h.Restore(ctx, snap, localOnly(func(_ context.Context, snap Snapshot, env Env) (Session, error) {
		var err error
		rec, err = beginFaaSnapRecord(snap, env, old.GroupSize)
		return rec, err
	}))
	if err != nil {
		return RefreshBuild{}, err
	}
	err = vm.Invoke(ctx)
	var order []uint64
	if err == nil {
		order = rec.recordedPages()
	}
	vm.Close()
	if err != nil {
		return RefreshBuild{}, err
	}
	art, _, err := buildFaaSnap(dir, snap, order, memlayout.FaaSnapOptions{GroupSize: old.GroupSize, MergeGap: int(old.MergeGap)})
	if err != nil {
		return RefreshBuild{}, err
	}
	return buildOf(art.Stats.LoadingSetPages, filepath.Join(dir, FaaSnapLoadingSet))
}

// refreshSnapBPF captures again what enters the page cache while snap
// restores as vanilla and runs the record input.
func refreshSnapBPF(ctx context.Context, h RecordHost, snap Snapshot, dir string, o RecordOptions) (RefreshBuild, error) {
	if err := capture.Check(o.SnapBPFObject); err != nil {
		return RefreshBuild{}, fmt.Errorf("snapbpf capture unavailable: %w", err)
	}
	res, err := captureSnapBPF(ctx, h, snap, o.SnapBPFObject)
	if err != nil {
		return RefreshBuild{}, err
	}
	art, err := memlayout.WriteSnapBPF(dir, snap.MemoryPath(), memSHA(snap), res.Pages(), uint64(len(res.Events)), res.Dropped)
	if err != nil {
		return RefreshBuild{}, fmt.Errorf("build artifact: %w", err)
	}
	return RefreshBuild{Pages: art.PrefetchPages()}, nil
}

// buildOf is the build of a set of pages whose data file is path.
func buildOf(pages uint64, path string) (RefreshBuild, error) {
	st, err := os.Stat(path)
	if err != nil {
		return RefreshBuild{}, err
	}
	return RefreshBuild{Pages: pages, Bytes: st.Size()}, nil
}

// ReadSet reads strategy k's artifact in dir: the size of its recorded set
// and its manifest's checksum (equal checksums: the same set, from the
// same memory file).
func ReadSet(dir string, k Kind) (RefreshBuild, string, error) {
	switch k {
	case REAP:
		a, err := memlayout.ReadREAP(dir)
		if err != nil {
			return RefreshBuild{}, "", err
		}
		return RefreshBuild{Pages: memlayout.CountPages(a.Pages), Bytes: a.WSFile.Size}, a.Checksum, nil
	case FaaSnap:
		a, err := memlayout.ReadFaaSnap(dir)
		if err != nil {
			return RefreshBuild{}, "", err
		}
		return RefreshBuild{Pages: a.Stats.LoadingSetPages, Bytes: a.LoadingSetFile.Size}, a.Checksum, nil
	case SnapBPF:
		a, err := memlayout.ReadSnapBPF(dir)
		if err != nil {
			return RefreshBuild{}, "", err
		}
		return RefreshBuild{Pages: a.PrefetchPages()}, a.Checksum, nil
	}
	return RefreshBuild{}, "", fmt.Errorf("strategy %s records no set", k)
}
