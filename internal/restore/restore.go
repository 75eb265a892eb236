// Package restore holds thaw's snapshot restore strategies: how the guest
// memory of a snapshot is mapped into a restored VM, how its pages reach
// memory and, for strategies that learn from a recorded invocation, how
// prepare builds their artifacts. Each strategy is one Strategy value in
// the registry (strategy.go); nothing outside this package branches on a
// strategy's kind.
//
// A strategy sees a narrow handle: the snapshot directory and manifest, the
// VM's run directory and, once QEMU runs, its pid. It never sees QEMU's
// argv; it describes guest memory with vmm.Memory (file, sharing, backing
// and what the VM may do to the file), which the VMM backend carries out.
package restore

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/restore/loader"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// Kind names a restore strategy.
type Kind string

// Default is the strategy used when a request names none.
const Default = Vanilla

// ParseKind validates a strategy name; "" means Default.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return Default, nil
	}
	if _, ok := Lookup(Kind(s)); ok {
		return Kind(s), nil
	}
	names := make([]string, len(Kinds()))
	for i, k := range Kinds() {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown restore strategy %q (one of: %s)", s, strings.Join(names, ", "))
}

// Snapshot is the narrow view of a snapshot a strategy sees.
type Snapshot struct {
	Dir      string
	Manifest *snapshot.Manifest
	// Source, when set, serves the guest memory: the memory file is not on
	// this host, and the file at MemoryPath is a placeholder of its size
	// (sparse, all holes) that QEMU opens and never reads. Only strategies
	// marked Lazy restore such a snapshot.
	Source MemorySource
	// MemFile, when set, is the memory file (or placeholder) QEMU opens
	// instead of the one in Dir.
	MemFile string
	// Remote, with Source, serves the strategies' artifact files that
	// are remote too (Artifact.Remote; keyed by ArtifactPath): the local
	// files are placeholders. A lazy faasnap restore streams its loading
	// set (prefetched in file order), a lazy reap restore its working set
	// (parallel fetches from the start of the restore, while QEMU starts);
	// their chunks are verified as they are fetched.
	Remote map[string]MemorySource
}

// MemoryPath is the snapshot's guest memory file (or its placeholder).
func (s Snapshot) MemoryPath() string {
	if s.MemFile != "" {
		return s.MemFile
	}
	return filepath.Join(s.Dir, snapshot.MemoryFile)
}

// remote is the source of strategy k's remote artifact name, nil if local.
func (s Snapshot) remote(k Kind, name string) MemorySource { return s.Remote[ArtifactPath(k, name)] }

// ArtifactDir is where a strategy keeps the artifacts it built for s.
func (s Snapshot) ArtifactDir(k Kind) string { return filepath.Join(s.Dir, "strategies", string(k)) }

func memSize(s Snapshot) int64 { return s.Manifest.Files[snapshot.MemoryFile].Size }
func memSHA(s Snapshot) string { return s.Manifest.Files[snapshot.MemoryFile].SHA256 }

// Loaders, Load and Extent are FaaSnap's loaders (package loader).
type (
	Loaders = loader.Loaders
	Load    = loader.Load
	Extent  = loader.Extent
)

// NewLoaders returns an empty registry of loaders.
func NewLoaders() *Loaders { return loader.NewLoaders() }

// Env is what the daemon provides to one restore.
type Env struct {
	RunDir  string // the VM's private directory (sockets, layout table)
	Log     *slog.Logger
	Loaders *Loaders     // FaaSnap loaders shared across restores
	Store   *store.Store // the snapshot memory store (premap); nil if none
	VMID    string       // the VM being restored (owner of a device store's clone range)
	// HugePages keeps QEMU's MADV_HUGEPAGE hint on the snapshot's memory
	// mapping (each major fault then reads about 4 MiB); false drops it,
	// as Firecracker maps snapshots. The same for every strategy.
	HugePages bool
	// Variant is a variant of the strategy (Strategy.Variants; FaaSnap's
	// techniques switched off), "" for the strategy itself.
	Variant string
	// Strict refuses a fallback: a strategy that cannot begin returns a
	// *FallbackRefusedError instead of running as vanilla.
	Strict bool
}

// Stats are a restore's strategy-specific measurements: the fields every
// strategy may set and one part a strategy (the API's StrategyStats).
type Stats = wire.StrategyStats

// Session is one restore in progress.
type Session interface {
	// Kind is the strategy actually used (Vanilla after a fallback).
	Kind() Kind
	// Memory is how the VMM must back guest memory (the VMM backend turns
	// it into its own settings).
	Memory() vmm.Memory
	// Untimed is time the strategy spent before the restore proper that
	// is reported apart and is not part of set-up or total (cached's page
	// cache fill); zero for the others.
	Untimed() time.Duration
	// Started runs once the VMM process exists and before its device state
	// is loaded; strategies that must act before the vCPU runs do it here.
	Started(ctx context.Context, pid int) error
	// Failed delivers an error if the strategy can no longer serve the
	// VM's memory (REAP's fault server stopped while QEMU lives: the
	// kernel would then silently hand the guest zero pages); the daemon
	// kills the VM. Nil for strategies that cannot fail after Started.
	Failed() <-chan error
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
	st, ok := Lookup(kind)
	if !ok {
		return nil, fmt.Errorf("restore strategy %q is not available", kind)
	}
	return st.Start(ctx, snap, env)
}

func fallback(kind Kind, snap Snapshot, env Env, cause error) (Session, error) {
	reason := fmt.Sprintf("%s artifacts unusable, restored with vanilla: %v", kind, cause)
	if env.Log != nil {
		env.Log.Warn("restore strategy fallback", "strategy", kind, "snapshot", snap.Dir, "reason", reason)
	}
	return beginVanilla(snap, env, reason)
}

// protected is m with its memory file kept intact and the restore's
// huge-page choice (see sessionBase.protected).
//
// The memory file is kept intact: QEMU 7.2 punches holes
// into a RAM block's file when the guest reports pages free (virtio-balloon
// free page reporting), even when the file is mapped private, which would
// zero pages of the snapshot (or of premap's store copy) that every other
// clone still restores. The interposer turns those punches into no-ops
// (docs/shim-layout.md, protection); QEMU still drops the clone's private
// copies of the freed pages. Every strategy's memory goes through this.
func (b sessionBase) protected(m vmm.Memory) vmm.Memory {
	m.File.KeepIntact = true
	// QEMU madvises guest RAM MADV_HUGEPAGE; on a file mapping that makes
	// each major fault read about 4 MiB. Firecracker gives no such hint:
	// the interposer drops it unless the restore keeps it.
	m.File.HugePages = b.hugePages
	return m
}

// sessionBase gives sessions the answers most of them share, and what
// every session's memory carries (the huge-page choice of Env).
type sessionBase struct{ hugePages bool }

// base is the sessionBase of a restore in env.
func base(env Env) sessionBase { return sessionBase{hugePages: env.HugePages} }

func (sessionBase) Untimed() time.Duration             { return 0 }
func (sessionBase) Started(context.Context, int) error { return nil }
func (sessionBase) Failed() <-chan error               { return nil }
func (sessionBase) InvocationDone()                    {}
func (sessionBase) Close() error                       { return nil }

// verifiedArtifact reads strategy k's artifact of snap and verifies it and
// its data file against the snapshot's memory file (hashing the data file
// once per stamp); it returns the artifact and the data file's path.
func verifiedArtifact[A interface {
	Verify(memSize int64, memSHA256 string, full bool) error
}](snap Snapshot, k Kind, read func(dir string) (A, error), dataFile string) (A, string, error) {
	return verifiedArtifactIn(snap, snap.ArtifactDir(k), read, dataFile)
}

// verifiedArtifactIn is verifiedArtifact of the artifact in dir.
func verifiedArtifactIn[A interface {
	Verify(memSize int64, memSHA256 string, full bool) error
}](snap Snapshot, dir string, read func(dir string) (A, error), dataFile string) (A, string, error) {
	art, err := read(dir)
	if err != nil {
		return art, "", err
	}
	path := filepath.Join(dir, dataFile)
	if rel, err := filepath.Rel(snap.Dir, path); err == nil && snap.Remote[filepath.ToSlash(rel)] != nil {
		// A placeholder: its bytes are verified per chunk as they are fetched.
		return art, path, art.Verify(memSize(snap), memSHA(snap), false)
	}
	err = snapshot.VerifyOnce(path, func(full bool) error { return art.Verify(memSize(snap), memSHA(snap), full) })
	return art, path, err
}
