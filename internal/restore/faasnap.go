package restore

import (
	"context"
	"fmt"
	"sync"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/uffd"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// FaaSnap maps zero regions anonymous, non-zero regions to the memory file
// and the loading set to a compact loading-set file, and prefetches that
// file concurrently with the guest (EuroSys'22, section 4).
const FaaSnap Kind = "faasnap"

// FaaSnap's artifact files (memlayout.WriteFaaSnap).
const (
	FaaSnapManifest   = "faasnap.json"
	FaaSnapLoadingSet = "loadingset.bin"
)

// FaaSnapStats: the loader of one restore.
type FaaSnapStats struct {
	LoaderBytes        uint64  `json:"loader_bytes,omitempty" unit:"bytes" desc:"loading-set bytes read by the loader"`
	LoaderMS           float64 `json:"loader_ms,omitempty" unit:"ms" desc:"loader start to end"`
	LoaderShared       bool    `json:"loader_shared,omitempty" desc:"joined a loader already running (burst)"`
	LoaderBeforeInvoke *bool   `json:"loader_finished_first,omitempty" desc:"the loader finished before the invocation answered"`
	// Variant is the FaaSnap variant restored (techniques switched off,
	// docs/bench/ablation.md); empty for all of FaaSnap.
	Variant string `json:"variant,omitempty" desc:"the variant restored (techniques switched off)"`
}

// faasnap maps guest memory in FaaSnap's overlapping layers (anonymous,
// non-zero regions of the memory file, loading-set regions of the
// loading-set file) through the interposer, while a loader reads the
// loading-set file concurrently with the guest (docs/design.md, faasnap).
type faasnap struct {
	sessionBase
	snap    Snapshot
	art     *memlayout.FaaSnapArtifact
	lsPath  string
	layout  *vmm.Layout
	entries int
	load    *Load
	joined  bool
	variant string

	mu            sync.Mutex
	finishedFirst *bool
}

func beginFaaSnap(_ context.Context, snap Snapshot, env Env) (Session, error) {
	art, lsPath, err := verifiedArtifactIn(snap, faasnapArtifactDir(snap, env.Variant), memlayout.ReadFaaSnap, FaaSnapLoadingSet)
	if err != nil {
		return nil, err
	}
	if snap.Source != nil {
		if env.Variant != "" {
			return nil, fmt.Errorf("faasnap variant %s restores local memory files only", env.Variant)
		}
		return beginLazyFaaSnap(snap, env, art, lsPath)
	}
	f := &faasnap{sessionBase: base(env), snap: snap, art: art, lsPath: lsPath, variant: env.Variant}
	if env.Variant != VariantConcurrent { // concurrent paging alone maps the memory file whole
		t, err := art.ShimTable()
		if err != nil {
			return nil, err
		}
		ls := lsPath
		if env.Variant == VariantNoLoadingSet {
			t.Entries, ls = t.Entries[:len(art.NonzeroRegions)], ""
		}
		if f.layout, err = layoutOf(t.MemSize, t.Entries, ls, ""); err != nil {
			return nil, err
		}
		f.entries = len(f.layout.Ranges)
	}
	if ext := loaderExtents(art, env.Variant); ext != nil {
		mem := snap.MemoryPath()
		f.load, f.joined = env.Loaders.StartExtents(mem+"#"+env.Variant, mem, ext)
	} else {
		// Keyed by the file's digest too: a restore after a refresh swapped
		// the loading set never joins a load of the one it replaced.
		f.load, f.joined = env.Loaders.StartExtents(lsPath+"@"+art.LoadingSetFile.SHA256, lsPath, nil)
	}
	return f, nil
}

func (f *faasnap) Kind() Kind { return FaaSnap }

func (f *faasnap) Memory() vmm.Memory {
	if f.layout == nil {
		return f.protected(vmm.Memory{Path: f.snap.MemoryPath(), Shared: false})
	}
	return f.protected(vmm.Memory{Path: f.snap.MemoryPath(), Shared: false, Backing: vmm.Backing{Kind: vmm.BackedByLayout, Layout: f.layout}})
}

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
	return withPart(Stats{LayoutEntries: f.entries, DaemonReadBytes: f.load.Bytes(), FetchMS: msOf(f.load.Duration()), FetchBytes: f.load.Bytes()}, FaaSnap, FaaSnapStats{LoaderBytes: f.load.Bytes(),
		LoaderMS: msOf(f.load.Duration()), LoaderShared: f.joined, LoaderBeforeInvoke: f.finishedFirst, Variant: f.variant})
}

// beginLazyFaaSnap restores from a memory source: guest memory is anonymous
// and registered with userfaultfd; a loader installs the loading set from
// its local file with UFFDIO_COPY while the guest runs (FaaSnap's
// concurrent paging, §4.2, done by installing pages instead of reading them
// into the page cache); a fault on a loading-set page not yet installed is
// served from the same file, a fault on a page the artifact knows is zero
// gets a zero page, and only the rest is read from the source.
func beginLazyFaaSnap(snap Snapshot, env Env, art *memlayout.FaaSnapArtifact, lsPath string) (Session, error) {
	src, ls := newPageSource(snap.Source), snap.remote(FaaSnap, FaaSnapLoadingSet)
	if err := src.withLoadingSet(art, lsPath, ls); err != nil {
		return nil, err
	}
	if ls != nil {
		// A remote loading set: fetched ahead in file order from now on
		// (parallel GETs), while QEMU starts; the loader and the faults
		// read it as its chunks arrive.
		ls.Prefetch(context.Background(), 0, ls.Size())
	}
	runs := make([]uffd.FileRun, len(art.LoadingRegions))
	for i, l := range art.LoadingRegions {
		runs[i] = uffd.FileRun{Page: l.Start, Pages: l.Pages, FileOff: l.FileOff}
	}
	s, err := startUffd(snap, env, uffdPlan{kind: FaaSnap, source: src, lsFile: lsPath, lsRuns: runs, entries: len(runs), lsSource: ls})
	if err != nil {
		src.close()
		return nil, err
	}
	return s, nil
}

var faasnapStrategy = Strategy{Kind: FaaSnap, Begin: beginFaaSnap, Fallback: true, Record: recordFaaSnap, Warm: true, Lazy: true,
	Variants: FaaSnapVariants, Finish: finishFaaSnap, Auto: true, AutoOrder: 1, Ready: hasArtifact(FaaSnap, FaaSnapManifest),
	Refresh: refreshFaaSnap, StatsPart: FaaSnapStats{}, BuildPart: FaaSnapBuild{},
	Artifacts: []Artifact{{Name: FaaSnapManifest, Required: true}, {Name: FaaSnapLoadingSet, Required: true, Remote: true}}}
