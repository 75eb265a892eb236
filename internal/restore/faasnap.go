package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Artifact file names (written by memlayout.WriteFaaSnap / WriteREAP).
const (
	FaaSnapManifest    = "faasnap.json"
	FaaSnapLoadingSet  = "loadingset.bin"
	REAPManifest       = "reap.json"
	REAPWorkingSetFile = "ws.bin"
)

// faasnap restores with FaaSnap's per-region mapping and concurrent paging
// (EuroSys'22 section 4):
//   - per-region mapping (4.5) and overlapping mappings (4.8, Figure 4): the
//     interposer in QEMU maps the whole guest memory anonymous, the non-zero
//     regions of the memory file on top, and the loading-set regions of the
//     loading-set file on top of those. FaaSnap patched Firecracker to do
//     this; thaw interposes on QEMU's one mmap of the memory file;
//   - concurrent paging (4.2): a loader reads the loading-set file
//     sequentially, in group order, from the moment the request arrives;
//     the VM resumes without waiting for it.
type faasnap struct {
	snap    Snapshot
	art     *memlayout.FaaSnapArtifact
	lsPath  string
	layout  string
	entries int
	load    *Load
	joined  bool

	mu            sync.Mutex
	finishedFirst *bool
}

func beginFaaSnap(_ context.Context, snap Snapshot, env Env) (Session, error) {
	if env.ShimPath == "" {
		return nil, errors.New("the memory-layout interposer (libthaw_shim.so) is not available")
	}
	if _, err := os.Stat(env.ShimPath); err != nil {
		return nil, fmt.Errorf("interposer: %w", err)
	}
	dir := snap.ArtifactDir(FaaSnap)
	art, err := memlayout.ReadFaaSnap(dir)
	if err != nil {
		return nil, err
	}
	lsPath := filepath.Join(dir, FaaSnapLoadingSet)
	if err := verifyArtifact(lsPath, func(full bool) error {
		return art.Verify(memSize(snap), memSHA(snap), full)
	}); err != nil {
		return nil, err
	}
	layout, err := art.ShimLayout()
	if err != nil {
		return nil, err
	}
	layoutPath := filepath.Join(env.RunDir, "layout.bin")
	if err := os.WriteFile(layoutPath, layout, 0o600); err != nil {
		return nil, err
	}
	f := &faasnap{snap: snap, art: art, lsPath: lsPath, layout: layoutPath,
		entries: (len(layout) - 32) / 32}
	f.load, f.joined = env.Loaders.Start(lsPath)
	return f, nil
}

func (f *faasnap) Kind() Kind { return FaaSnap }

func (f *faasnap) Memory() vmm.Memory {
	return vmm.Memory{Path: f.snap.MemoryPath(), Shared: false, Interposer: vmm.Interposer{
		Mode: vmm.ModeLayout, MemFile: f.snap.MemoryPath(), Layout: f.layout, LSFile: f.lsPath}}
}

func (f *faasnap) Started(context.Context, int) error { return nil }

func (f *faasnap) InvocationDone() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finishedFirst == nil {
		done := f.load.Finished()
		f.finishedFirst = &done
	}
}

func (f *faasnap) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	return Stats{LayoutEntries: f.entries, LoaderBytes: f.load.Bytes(),
		LoaderMS: float64(f.load.Duration().Microseconds()) / 1000, LoaderShared: f.joined,
		LoaderBeforeInvoke: f.finishedFirst}
}

func (f *faasnap) Close() error { return nil }

func memSize(s Snapshot) int64 { return s.Manifest.Files[snapshot.MemoryFile].Size }
func memSHA(s Snapshot) string { return s.Manifest.Files[snapshot.MemoryFile].SHA256 }

// verifiedStamps remembers artifact data files that were fully verified in
// this process, by their stamp (inode, size, mtime, ctime). A data file of
// tens of MB is hashed once, not on every restore; any change to it changes
// its stamp and forces a full check again, as for snapshot memory files.
var verifiedStamps sync.Map // path -> snapshot.Stamp

// verifyArtifact runs check(full) with full=true unless path's stamp was
// verified before, and then records it.
func verifyArtifact(path string, check func(full bool) error) error {
	st, err := snapshot.StampOf(path)
	if err != nil {
		return err
	}
	prev, ok := verifiedStamps.Load(path)
	full := !ok || prev.(snapshot.Stamp) != st
	if err := check(full); err != nil {
		verifiedStamps.Delete(path)
		return err
	}
	if full {
		verifiedStamps.Store(path, st)
	}
	return nil
}

// TrustArtifact records that path was just verified (the daemon verifies
// artifacts fully right after building them).
func TrustArtifact(path string) error {
	st, err := snapshot.StampOf(path)
	if err != nil {
		return err
	}
	verifiedStamps.Store(path, st)
	return nil
}
