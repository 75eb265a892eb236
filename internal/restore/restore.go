// Package restore holds thaw's snapshot restore strategies: how the guest
// memory of a snapshot is mapped into a restored VM and how its pages reach
// memory. The set of strategies is closed: a Kind names one, and Begin is
// the single place that branches on it (as Firecracker's persist.rs
// branches on MemBackendType).
//
// A strategy sees a narrow handle: the snapshot directory and manifest, the
// VM's run directory and, once QEMU runs, its pid. It never sees QEMU's
// argv; it describes guest memory with vmm.Memory (file, sharing, and the
// environment that loads the interposer shim).
package restore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Kind names a restore strategy.
type Kind string

const (
	// Vanilla maps the snapshot's memory file private and copy-on-write, the
	// equivalent of Firecracker's File memory backend: the host kernel pages
	// guest memory in on demand (with its readahead); the file is never
	// modified, so any number of VMs restore from it at once.
	Vanilla Kind = "vanilla"
	// Cached is vanilla with the whole memory file in the host page cache
	// before the restore starts: FaaSnap's reference point (not practical,
	// the bar to reach). Filling the cache is reported, not timed.
	Cached Kind = "cached"
	// REAP records the pages the first invocation faults (userfaultfd) and
	// later installs them all from a compact working-set file, read with one
	// O_DIRECT read, before the vCPU runs (ASPLOS'21).
	REAP Kind = "reap"
	// FaaSnap maps zero regions anonymous, non-zero regions to the memory
	// file and the loading set to a compact loading-set file, and prefetches
	// that file concurrently with the guest (EuroSys'22, section 4).
	FaaSnap Kind = "faasnap"
	// Premap maps the whole guest memory from the snapshot memory store
	// (tmpfs or persistent memory) and pre-faults every page before the
	// vCPU runs (PASS, seed 001, §3-4): no page faults for snapshot pages,
	// nothing copied, one copy of the store shared by all clones.
	Premap Kind = "premap"
	// SnapBPF maps the memory file like vanilla and prefetches the working
	// set captured in the kernel by an eBPF program (prepare) from that same
	// file into the page cache, concurrently with the guest (HotStorage'25).
	SnapBPF Kind = "snapbpf"
)

// Kinds lists every strategy, in the order documentation and benchmarks use.
var Kinds = []Kind{Vanilla, Cached, REAP, FaaSnap, Premap, SnapBPF}

// Default is the strategy used when a request names none.
const Default = Vanilla

// ParseKind validates a strategy name; "" means Default.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return Default, nil
	}
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown restore strategy %q (one of: %s)", s, strings.Join(names, ", "))
}

// Snapshot is the narrow view of a snapshot a strategy sees.
type Snapshot struct {
	Dir      string
	Manifest *snapshot.Manifest
}

// MemoryPath is the snapshot's guest memory file.
func (s Snapshot) MemoryPath() string { return filepath.Join(s.Dir, snapshot.MemoryFile) }

// ArtifactDir is where a strategy keeps the artifacts it built for s.
func (s Snapshot) ArtifactDir(k Kind) string { return filepath.Join(s.Dir, "strategies", string(k)) }

// Env is what the daemon provides to one restore.
type Env struct {
	RunDir   string // the VM's private directory (sockets, layout table)
	ShimPath string // libthaw_shim.so, for strategies that need a layout
	Log      *slog.Logger
	Loaders  *Loaders     // FaaSnap loaders shared across restores
	Store    *store.Store // the snapshot memory store (premap); nil if none
	VMID     string       // the VM being restored (owner of a device store's clone range)
	// OnFailure is called if the strategy can no longer serve the VM's
	// memory (REAP's fault server stopped while QEMU lives: the kernel
	// would then silently hand the guest zero pages). The daemon kills the
	// VM and marks it failed.
	OnFailure func(error)
}

// Stats are a restore's strategy-specific measurements. Fields that do not
// apply to the strategy used stay zero and are omitted.
type Stats struct {
	// Fallback explains why a requested strategy ran as vanilla.
	Fallback string `json:"fallback,omitempty"`
	// CacheFillMS: cached only, time to bring the memory file into the page
	// cache before the restore (not part of the restore's timing).
	CacheFillMS float64 `json:"cache_fill_ms,omitempty"`

	// REAP.
	PrefetchPages     uint64  `json:"prefetch_pages,omitempty"`     // installed before the vCPU ran
	PrefetchBytes     uint64  `json:"prefetch_bytes,omitempty"`     // working-set file read
	PrefetchMS        float64 `json:"prefetch_ms,omitempty"`        // read + install
	FaultsServed      uint64  `json:"faults_served,omitempty"`      // outside the working set
	FaultBytesRead    uint64  `json:"fault_bytes_read,omitempty"`   // memory file reads for them
	PrefetchDirectIO  bool    `json:"prefetch_direct_io,omitempty"` // O_DIRECT was used
	RecordedPageCount uint64  `json:"recorded_pages,omitempty"`     // record mode only

	// FaaSnap.
	LayoutEntries      int     `json:"layout_entries,omitempty"`        // mappings the shim made
	LoaderBytes        uint64  `json:"loader_bytes,omitempty"`          // loading-set bytes read by the loader
	LoaderMS           float64 `json:"loader_ms,omitempty"`             // loader start to end
	LoaderShared       bool    `json:"loader_shared,omitempty"`         // joined a loader already running (burst)
	LoaderBeforeInvoke *bool   `json:"loader_finished_first,omitempty"` // loader done before the invocation answered

	// Premap.
	StoreBytes     uint64  `json:"store_bytes,omitempty"`     // the store copy mapped (shared by every clone)
	PopulatedBytes uint64  `json:"populated_bytes,omitempty"` // guest memory pre-faulted before the vCPU ran
	PopulateMS     float64 `json:"populate_ms,omitempty"`     // time to pre-fault it (part of set-up)
	// Premap on device-DAX: the VM's own range of the device (persistent
	// memory it holds privately, a copy's size) and the time to fill it
	// from the stored copy (part of set-up).
	DeviceBytes uint64  `json:"device_bytes,omitempty"`
	CloneCopyMS float64 `json:"clone_copy_ms,omitempty"`

	// SnapBPF.
	SnapBPFRanges         int     `json:"snapbpf_ranges,omitempty"`          // prefetch ranges (capture order)
	SnapBPFPages          uint64  `json:"snapbpf_pages,omitempty"`           // pages they hold
	SnapBPFReadaheadCalls int     `json:"snapbpf_readahead_calls,omitempty"` // readahead(2) calls, re-issues included
	SnapBPFIssueMS        float64 `json:"snapbpf_issue_ms,omitempty"`        // first pass of readahead calls
	SnapBPFResidentPages  uint64  `json:"snapbpf_resident_pages,omitempty"`  // of SnapBPFPages, resident at the last mincore check
	SnapBPFResidentMS     float64 `json:"snapbpf_resident_ms,omitempty"`     // until mincore saw every page resident
	SnapBPFFinishedFirst  *bool   `json:"snapbpf_finished_first,omitempty"`  // all resident before the invocation answered
	SnapBPFError          string  `json:"snapbpf_error,omitempty"`           // the prefetch failed (the guest still runs, as vanilla)
}

// Session is one restore in progress.
type Session interface {
	// Kind is the strategy actually used (Vanilla after a fallback).
	Kind() Kind
	// Memory is how the VMM must back guest memory.
	Memory() vmm.Memory
	// Started runs once the VMM process exists and before its device state
	// is loaded; strategies that must act before the vCPU runs do it here.
	Started(ctx context.Context, pid int) error
	// InvocationDone tells the session the invocation answered.
	InvocationDone()
	// Stats reports what the strategy did.
	Stats() Stats
	// Close releases what the session holds (servers, sockets).
	Close() error
}

// Begin starts a restore of snap with kind. A strategy whose artifacts are
// missing, truncated, corrupt or built from another memory file falls back
// to vanilla: the session says so in Stats.Fallback and the log; it never
// maps bytes it has not verified belong to this snapshot.
func Begin(ctx context.Context, kind Kind, snap Snapshot, env Env) (Session, error) {
	switch kind {
	case Vanilla:
		return &vanilla{snap: snap}, nil
	case Cached:
		return beginCached(ctx, snap)
	case REAP:
		s, err := beginREAP(ctx, snap, env)
		return orFallback(kind, snap, env, s, err)
	case FaaSnap:
		s, err := beginFaaSnap(ctx, snap, env)
		return orFallback(kind, snap, env, s, err)
	case Premap:
		s, err := beginPremap(ctx, snap, env)
		return orFallback(kind, snap, env, s, err)
	case SnapBPF:
		s, err := beginSnapBPF(ctx, snap, env)
		return orFallback(kind, snap, env, s, err)
	}
	return nil, fmt.Errorf("restore strategy %q is not available", kind)
}

func orFallback(kind Kind, snap Snapshot, env Env, s Session, err error) (Session, error) {
	if err == nil {
		return s, nil
	}
	reason := fmt.Sprintf("%s artifacts unusable, restored with vanilla: %v", kind, err)
	if env.Log != nil {
		env.Log.Warn("restore strategy fallback", "strategy", kind, "snapshot", snap.Dir, "reason", reason)
	}
	return &vanilla{snap: snap, fallback: reason}, nil
}

// vanilla is the File memory backend.
type vanilla struct {
	snap     Snapshot
	fallback string
}

func (v *vanilla) Kind() Kind { return Vanilla }
func (v *vanilla) Memory() vmm.Memory {
	return vmm.Memory{Path: v.snap.MemoryPath(), Shared: false}
}
func (v *vanilla) Started(context.Context, int) error { return nil }
func (v *vanilla) InvocationDone()                    {}
func (v *vanilla) Stats() Stats                       { return Stats{Fallback: v.fallback} }
func (v *vanilla) Close() error                       { return nil }

// Protect makes m keep its memory file intact: QEMU 7.2 punches holes into
// a RAM block's file when the guest reports pages free (virtio-balloon free
// page reporting), even when the file is mapped private, which would zero
// pages of the snapshot (or of premap's store copy) that every other clone
// still restores. The interposer, preloaded into every restored QEMU for
// this, turns those punches into no-ops (docs/shim-layout.md, protection);
// QEMU still drops the clone's private copies of the freed pages.
func Protect(m vmm.Memory, shim string) (vmm.Memory, error) {
	if shim == "" {
		return m, errors.New("the interposer libthaw_shim.so is required to protect snapshot memory files from QEMU's discards and is not configured")
	}
	if _, err := os.Stat(shim); err != nil {
		return m, fmt.Errorf("the interposer that protects snapshot memory files from QEMU's discards: %w", err)
	}
	if m.Interposer.MemFile == "" {
		m.Interposer.MemFile = m.Path
	}
	m.Interposer.Protect = true
	return m, nil
}
