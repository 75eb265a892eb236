package snapshots

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/deps"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// world is the snapshots component on fakes of the daemon: a real catalog
// in a temporary directory holding function "hello" (a 1 MiB guest), and fakes of the
// functions, versions, registry and VMs that record what they were asked.
type world struct {
	t     *testing.T
	dir   string
	db    *catalog.DB
	m     *Manager
	fn    *catalog.Function
	accel string
	fns   *fakeFunctions
	vers  *fakeVersions
	reg   *fakeRegistry
	vms   *fakeVMs
	// traced are the verifications' spans ended: "id function err".
	traced []string
}

var testImage = &guestimage.Image{Hash: "img", Cmdline: "console=ttyS0", Files: map[string]guestimage.File{
	guestimage.Kernel: {SHA256: "k1"}, guestimage.Initrd: {SHA256: "i1"}, guestimage.Rootfs: {SHA256: "r1"}}}

func newWorld(t *testing.T, edit func(*Config)) *world {
	t.Helper()
	dir := t.TempDir()
	db, err := catalog.Open(filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	fn := &catalog.Function{Name: "hello", Digest: "code1", MemoryMiB: 1, VCPUs: 1, CreatedAt: time.Now()}
	if err := db.PutFunction(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, dir: dir, db: db, fn: fn, accel: "tcg", fns: &fakeFunctions{}, vers: &fakeVersions{db: db},
		reg: &fakeRegistry{}, vms: &fakeVMs{using: map[string]*catalog.VM{}}}
	snaps := filepath.Join(dir, "snapshots")
	if err := os.Mkdir(snaps, 0o700); err != nil {
		t.Fatal(err)
	}
	cfg := Config{Dir: snaps, Image: testImage, VMM: Machine{Name: "qemu", Version: "7.2.22", ABI: "pc-i440fx-7.2"}}
	if edit != nil {
		edit(&cfg)
	}
	w.m = New(cfg, Deps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Catalog: db, Functions: w.fns,
		Versions: w.vers, Registry: w.reg, VMs: w.vms, Accel: func() string { return w.accel },
		CheckName: func(name string) error {
			if name == "" || name[0] < 'a' || name[0] > 'z' {
				return fmt.Errorf("%w: function name %q", errdefs.ErrInvalid, name)
			}
			return nil
		},
		DepsInput:      func(*catalog.Function) *snapshot.Digest { return nil },
		CheckDepsInput: func(*snapshot.Manifest, *catalog.Function) error { return nil },
		TraceVerify: func(ctx context.Context, id string, full bool) (context.Context, func(string, error)) {
			return ctx, func(function string, err error) {
				w.traced = append(w.traced, fmt.Sprintf("%s %s %v", id, function, err))
			}
		}})
	return w
}

// source is a VM of w's function to snapshot: its memory a sparse 1 MiB
// file with data at both ends, its device state a small file.
func (w *world) source(version int) Source {
	ram := filepath.Join(w.t.TempDir(), "ram")
	f, err := os.Create(ram)
	if err != nil {
		w.t.Fatal(err)
	}
	f.WriteAt(bytes.Repeat([]byte{0xab}, 8192), 0)
	f.WriteAt(bytes.Repeat([]byte{0xcd}, 4096), 1<<20-4096)
	f.Close()
	return Source{VM: "vm-0123456789ab", Fn: w.fn, Version: version, Shared: true, Cmdline: "console=ttyS0 thaw.function=hello",
		Write: func(ctx context.Context, dir string) (snapshot.FileInfo, time.Duration, error) {
			if err := os.WriteFile(filepath.Join(dir, snapshot.StateFile), []byte("device state"), 0o600); err != nil {
				return snapshot.FileInfo{}, 0, err
			}
			mem, err := snapshot.CopySparse(filepath.Join(dir, snapshot.MemoryFile), ram)
			return mem, time.Millisecond, err
		}}
}

// take snapshots a fresh source of version.
func (w *world) take(version int) *catalog.Snapshot {
	w.t.Helper()
	sn, err := w.m.Take(context.Background(), w.source(version))
	if err != nil {
		w.t.Fatal(err)
	}
	return sn
}

// entries are the names in the snapshots directory.
func (w *world) entries() []string {
	des, _ := os.ReadDir(w.m.Dir())
	var out []string
	for _, d := range des {
		out = append(out, d.Name())
	}
	return out
}

type fakeFunctions struct {
	scanErr  error
	layerErr error
	kicks    int
}

func (f *fakeFunctions) ScanForSecrets(context.Context, string, string) error { return f.scanErr }
func (f *fakeFunctions) LayerOf(*catalog.Function) (*deps.Layer, error)       { return nil, f.layerErr }
func (f *fakeFunctions) KickDepsGC()                                          { f.kicks++ }

// fakeVersions restores every snapshot with its function's own
// configuration.
type fakeVersions struct {
	db      *catalog.DB
	pending []string
}

func (v *fakeVersions) SnapshotFunction(ctx context.Context, sn *catalog.Snapshot) (*catalog.Function, error) {
	return v.db.GetFunction(ctx, sn.Function)
}
func (v *fakeVersions) AddPending(id string, _ *catalog.Function) { v.pending = append(v.pending, id) }

type fakeRegistry struct {
	remote    *registry.RemoteManifest
	completed []string
}

func (r *fakeRegistry) RemoteManifest(sn *catalog.Snapshot) (*registry.RemoteManifest, error) {
	if r.remote == nil {
		return nil, fmt.Errorf("%w: no remote manifest of %s", errdefs.ErrSnapshotUnusable, sn.ID)
	}
	return r.remote, nil
}

func (r *fakeRegistry) NeedLocalMemory(sn *catalog.Snapshot, what string) error {
	if sn.RemoteMemory {
		return fmt.Errorf("%w: snapshot %s is lazy: pull it before %s", errdefs.ErrConflict, sn.ID, what)
	}
	return nil
}

func (r *fakeRegistry) Complete(ctx context.Context, id string) (*catalog.Snapshot, error) {
	r.completed = append(r.completed, id)
	return nil, errors.New("the fake registry completes nothing")
}

// fakeVMs: using are the live VMs by snapshot; held the snapshots whose
// standby VMs are held, released those held and let go.
type fakeVMs struct {
	mu       sync.Mutex
	using    map[string]*catalog.VM
	held     map[string]bool
	released []string
	dropped  []string
}

func (v *fakeVMs) Release(id string) func() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.held == nil {
		v.held = map[string]bool{}
	}
	v.held[id] = true
	return func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		delete(v.held, id)
		v.released = append(v.released, id)
	}
}

func (v *fakeVMs) Using(_ context.Context, id string) (*catalog.VM, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.using[id], nil
}

func (v *fakeVMs) DropStoreStandbys(id string) { v.dropped = append(v.dropped, id) }
