// Package snapshots is the daemon's snapshots component: it takes them
// (from a VM the daemon hands over), verifies them before a restore,
// copies, pins, collects and deletes them, and keeps the snapshot memory
// store (premap) with the copies placed in it.
package snapshots

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
)

// Config configures the component.
type Config struct {
	Dir   string            // the directory snapshots live in
	Keep  int               // newest snapshots kept per version by collection (0: no collection)
	Image *guestimage.Image // the guest image snapshots are taken of
	VMM   Machine           // the monitor VMs run in
	// StoreDir is the memory store's directory; StoreDeviceFile, if set,
	// replaces it with a fixed-size file standing in for a device-DAX
	// device.
	StoreDir        string
	StoreDeviceFile string
}

// Machine names the monitor a snapshot is taken with and restored in.
type Machine struct {
	Name    string // the backend's name
	Version string // its version
	ABI     string // the guest machine it builds
}

// Catalog is where snapshots are recorded (*catalog.DB).
type Catalog interface {
	GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error)
	ListSnapshots(ctx context.Context, function string) ([]*catalog.Snapshot, error)
	PutSnapshot(ctx context.Context, s *catalog.Snapshot) error
	DeleteSnapshot(ctx context.Context, id string) error
	SetSnapshotPinned(ctx context.Context, id string, pinned bool) error
	SetSnapshotPrepared(ctx context.Context, id, prepared string) error
	SetSnapshotParent(ctx context.Context, id, parent string) error
}

// Functions is the functions' code, layers and secrets (*functions.Manager).
type Functions interface {
	// ScanForSecrets refuses a directory holding a secret's value.
	ScanForSecrets(ctx context.Context, dir, what string) error
	// LayerOf is a function's dependency layer, an error if it is unusable.
	LayerOf(fn *catalog.Function) (*deps.Layer, error)
	// KickDepsGC asks for a collection of unused dependency layers.
	KickDepsGC()
}

// Versions is the functions' versions (*versions.Manager).
type Versions interface {
	// SnapshotFunction is the configuration a snapshot restores with.
	SnapshotFunction(ctx context.Context, sn *catalog.Snapshot) (*catalog.Function, error)
	// AddPending records a deploy's snapshot, restored with fn until the
	// deploy ends.
	AddPending(snapshot string, fn *catalog.Function)
}

// Registry is the snapshot registry's side of lazy snapshots.
type Registry interface {
	// RemoteManifest is a lazy snapshot's registry manifest.
	RemoteManifest(sn *catalog.Snapshot) (*registry.RemoteManifest, error)
	// NeedLocalMemory refuses a lazy snapshot for what needs its memory here.
	NeedLocalMemory(sn *catalog.Snapshot, what string) error
	// Complete pulls a lazy snapshot's memory into place.
	Complete(ctx context.Context, id string) (*catalog.Snapshot, error)
}

// VMs is what runs from snapshots: live, idle and standby VMs.
type VMs interface {
	// Release stops the idle and standby VMs of a snapshot and keeps new
	// standby VMs of it from starting until release is called.
	Release(id string) (release func())
	// Using is a live VM restored from the snapshot, or nil.
	Using(ctx context.Context, id string) (*catalog.VM, error)
	// DropStoreStandbys stops the standby VMs that map the snapshot's
	// store copy.
	DropStoreStandbys(id string)
}

// Deps is what the component needs of the rest of the daemon.
type Deps struct {
	Log       *slog.Logger
	Catalog   Catalog
	Functions Functions
	Versions  Versions
	Registry  Registry
	VMs       VMs
	// Accel is the accelerator the daemon runs (chosen at its start).
	Accel func() string
	// CheckName checks a function name's form.
	CheckName func(name string) error
	// DepsInput is the dependency digest a snapshot of fn records;
	// CheckDepsInput checks a manifest's against fn's.
	DepsInput      func(fn *catalog.Function) *snapshot.Digest
	CheckDepsInput func(m *snapshot.Manifest, fn *catalog.Function) error
	// TraceVerify starts a verification's span; end ends it with the
	// function it was verified for ("" if unknown) and its error.
	TraceVerify func(ctx context.Context, id string, full bool) (_ context.Context, end func(function string, err error))
}

// Manager is the snapshots component.
type Manager struct {
	cfg Config
	d   Deps
	log *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex // serialize the verification of one snapshot
	// store is the memory store, nil if unavailable (storeErr says why).
	store    *store.Store
	storeErr error
}

// New makes the component; its memory store opens with OpenStore.
func New(cfg Config, d Deps) *Manager {
	return &Manager{cfg: cfg, d: d, log: d.Log, locks: map[string]*sync.Mutex{},
		storeErr: errors.New("the memory store is not open yet")}
}

// Dir is the directory snapshots live in.
func (m *Manager) Dir() string { return m.cfg.Dir }

var idRE = regexp.MustCompile(`^snap-[0-9a-f]{12}$`)

// CheckID checks a snapshot id's form.
func CheckID(id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("%w: snapshot id %q is malformed", errdefs.ErrInvalid, id)
	}
	return nil
}

func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "snap-" + hex.EncodeToString(b[:])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// noSpace makes a full disk's error ErrNoSpace.
func noSpace(err error, what string) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("%w: %s: %v; nothing was kept", errdefs.ErrNoSpace, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// Lock is the lock that serializes the verification of one snapshot.
func (m *Manager) Lock(id string) *sync.Mutex {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.locks[id]
	if !ok {
		l = new(sync.Mutex)
		m.locks[id] = l
	}
	return l
}

// Source is a VM to snapshot, as the daemon hands it over.
type Source struct {
	VM      string
	Fn      *catalog.Function
	Version int    // < 0: a deploy's, restored with Fn until it is published
	Shared  bool   // its memory is a shared file (a booted VM)
	Cmdline string // the kernel command line it booted with
	// Write fills dir with the VM's device state and memory file and
	// returns the memory file's description and how long the VM was
	// paused.
	Write func(ctx context.Context, dir string) (mem snapshot.FileInfo, pause time.Duration, err error)
}

// Take snapshots a VM: nothing is visible until the snapshot is complete
// and durable; on any failure (a full disk, a VMM error) every partial file
// is removed.
func (m *Manager) Take(ctx context.Context, src Source) (*catalog.Snapshot, error) {
	if !src.Shared {
		return nil, fmt.Errorf("%w: vm %s was restored with private memory; only booted VMs can be snapshotted", errdefs.ErrConflict, src.VM)
	}
	id := newID()
	tmp, final := filepath.Join(m.cfg.Dir, ".tmp-"+id), filepath.Join(m.cfg.Dir, id)
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", id, err)
	}
	start := time.Now()
	var man *snapshot.Manifest
	mem, pause, err := src.Write(ctx, tmp)
	if err == nil {
		man = m.manifest(id, src.Fn, src.Cmdline, mem)
		err = m.d.Functions.ScanForSecrets(ctx, tmp, "snapshot "+id+" of vm "+src.VM)
	}
	if err == nil {
		err = snapshot.Commit(tmp, final, man)
	}
	if err != nil {
		_ = os.RemoveAll(tmp)
		return nil, noSpace(err, "snapshot "+id+" of vm "+src.VM)
	}
	stamp, err := stampOf(final)
	if err != nil {
		_ = os.RemoveAll(final)
		return nil, err
	}
	rec := &catalog.Snapshot{ID: id, Function: src.Fn.Name, SourceVM: src.VM, Dir: final,
		MemoryMiB: man.Guest.MemoryMiB, Stamp: stamp, CreateMS: ms(time.Since(start)),
		PauseMS: ms(pause), CreatedAt: man.CreatedAt, Version: src.Version}
	if src.Version < 0 {
		// A deploy's snapshot restores with the deploy's configuration
		// until its version is published (or the deploy fails).
		m.d.Versions.AddPending(id, src.Fn)
	}
	for _, f := range man.Files {
		rec.SizeBytes += f.Size
		rec.DiskBytes += f.Allocated
	}
	if err := m.d.Catalog.PutSnapshot(ctx, rec); err != nil {
		_ = os.RemoveAll(final)
		return nil, err
	}
	m.log.Info("snapshot created", "snapshot", id, "vm", src.VM, "create_ms", rec.CreateMS,
		"pause_ms", rec.PauseMS, "disk_bytes", rec.DiskBytes)
	return rec, nil
}

// manifest is the manifest of snapshot id of fn with memory file mem.
func (m *Manager) manifest(id string, fn *catalog.Function, cmdline string, mem snapshot.FileInfo) *snapshot.Manifest {
	return &snapshot.Manifest{
		ID: id, Function: fn.Name, CreatedAt: time.Now().UTC(),
		Guest:  snapshot.Guest{MemoryMiB: fn.MemoryMiB, VCPUs: fn.VCPUs, Machine: m.cfg.VMM.ABI, Cmdline: cmdline},
		VMM:    snapshot.VMM{Name: m.cfg.VMM.Name, Version: m.cfg.VMM.Version, Accel: m.d.Accel()},
		Inputs: m.Inputs(fn),
		Files:  map[string]snapshot.FileInfo{snapshot.MemoryFile: mem},
	}
}

// stampOf is the stamp of a published snapshot's memory file, as the
// catalog keeps it.
func stampOf(dir string) (string, error) {
	st, err := snapshot.StampOf(filepath.Join(dir, snapshot.MemoryFile))
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(st)
	return string(b), nil
}

// Inputs are the digests a snapshot of fn depends on, as they are now.
func (m *Manager) Inputs(fn *catalog.Function) snapshot.Inputs {
	im := m.cfg.Image
	return snapshot.Inputs{
		Kernel:   snapshot.Digest{SHA256: im.Files[im.KernelFile()].SHA256},
		Initrd:   snapshot.Digest{SHA256: im.Files[guestimage.Initrd].SHA256},
		Rootfs:   snapshot.Digest{SHA256: im.Files[guestimage.Rootfs].SHA256},
		Function: snapshot.Digest{SHA256: fn.Digest},
		Deps:     m.d.DepsInput(fn),
	}
}

// Get returns a snapshot.
func (m *Manager) Get(ctx context.Context, id string) (*catalog.Snapshot, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	return m.d.Catalog.GetSnapshot(ctx, id)
}

// List returns snapshots, of one function if function is set.
func (m *Manager) List(ctx context.Context, function string) ([]*catalog.Snapshot, error) {
	if function != "" {
		if err := m.d.CheckName(function); err != nil {
			return nil, err
		}
	}
	return m.d.Catalog.ListSnapshots(ctx, function)
}

// Pin pins a snapshot (collection keeps it) or unpins it.
func (m *Manager) Pin(ctx context.Context, id string, pinned bool) (*catalog.Snapshot, error) {
	if err := CheckID(id); err != nil {
		return nil, err
	}
	if err := m.d.Catalog.SetSnapshotPinned(ctx, id, pinned); err != nil {
		if errors.Is(err, catalog.ErrNotFound) {
			return nil, fmt.Errorf("%w: snapshot %s", errdefs.ErrNotFound, id)
		}
		return nil, err
	}
	return m.Get(ctx, id)
}

// Delete removes a snapshot no live VM was restored from.
func (m *Manager) Delete(ctx context.Context, id string) error {
	sn, err := m.Get(ctx, id)
	if err != nil {
		return err
	}
	release := m.d.VMs.Release(id) // no new standby VMs while it goes
	if v, err := m.d.VMs.Using(ctx, id); err != nil || v != nil {
		release()
		if err == nil {
			err = fmt.Errorf("%w: snapshot %s is in use by vm %s (%s)", errdefs.ErrConflict, id, v.ID, v.State)
		}
		return err
	}
	err = m.d.Catalog.DeleteSnapshot(ctx, id)
	release() // from now on a fill finds no snapshot
	if err != nil {
		return err
	}
	if st := m.Store(); st != nil {
		if err := st.Remove(id); err != nil {
			m.log.Error("remove snapshot from the memory store", "snapshot", id, "err", err)
		}
	}
	defer m.d.Functions.KickDepsGC()
	return os.RemoveAll(sn.Dir)
}

// Collect keeps the newest Keep snapshots of each of the function's
// versions (and of its unversioned ones) and deletes the older ones that
// are not pinned, not in use (a live VM restored from it, or kept idle)
// and not in spare (a snapshot just pulled, however old); nothing with
// Keep 0. Whole versions go by version retention, never here.
func (m *Manager) Collect(ctx context.Context, function string, spare ...string) {
	keep := m.cfg.Keep
	if keep <= 0 {
		return
	}
	snaps, err := m.d.Catalog.ListSnapshots(ctx, function) // oldest first
	if err != nil || len(snaps) <= keep {
		return
	}
	byVersion := map[int][]*catalog.Snapshot{}
	for _, sn := range snaps {
		if sn.Version >= 0 { // a deploy's pending snapshots are its own
			byVersion[sn.Version] = append(byVersion[sn.Version], sn)
		}
	}
	for _, group := range byVersion {
		if len(group) <= keep {
			continue
		}
		for _, sn := range group[:len(group)-keep] {
			if sn.Pinned || slices.Contains(spare, sn.ID) {
				continue
			}
			if v, err := m.d.VMs.Using(ctx, sn.ID); err != nil || v != nil {
				continue
			}
			if err := m.Delete(ctx, sn.ID); err != nil {
				m.log.Warn("snapshot garbage collection", "snapshot", sn.ID, "err", err)
				continue
			}
			m.log.Info("snapshot collected", "snapshot", sn.ID, "function", function, "version", sn.Version, "keep", keep)
		}
	}
}
