package versions

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// harness is a Manager on a real catalog in a temporary directory, its
// Deps faked: boots and snapshots are catalog rows and directories, and
// what the component asked of the daemon is recorded.
type harness struct {
	t   *testing.T
	m   *Manager
	db  *catalog.DB
	dir string

	mu         sync.Mutex
	seq        int
	booted     []*catalog.Function // configurations booted
	deletedVMs []string
	deleted    []string // snapshots deleted here
	pushed     []string
	outcomes   []string // deploy metrics
	collected  int      // version metrics
	spanErrs   []error
	registry   *fakeRegistry
	inputs     BuildInputs
	vms        sync.Map // the booted VMs (bootedVM), by id

	// rebuilding: boots and prepares are a rebuild's (of a version), not
	// a deploy's (-1).
	rebuilding bool
	rebuilt    []int             // versions booted or prepared by rebuilds
	records    []json.RawMessage // the record inputs prepares were given
	ops        []string          // operations started: kind target
	opErrs     []error           // their work's errors, in order
	opResults  []*wire.OperationResult
	rebuilds   []string // rebuild metrics: reason outcome

	bootErr, publishErr, prepareErr, startErr error
}

// bootedVM is a booted VM's configuration and version.
type bootedVM struct {
	fn      *catalog.Function
	version int
}

type fakeRegistry struct {
	mu        sync.Mutex
	snapshots []string
	versions  []string
}

func (r *fakeRegistry) DeleteSnapshot(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.snapshots = append(r.snapshots, id)
	return nil
}

func (r *fakeRegistry) DeleteVersion(_ context.Context, function string, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.versions = append(r.versions, fmt.Sprintf("%s:%d", function, n))
	return nil
}

type fakeMetrics struct{ h *harness }

func (f fakeMetrics) Deploy(outcome string) { f.h.record(&f.h.outcomes, outcome) }
func (f fakeMetrics) VersionCollected()     { f.h.mu.Lock(); f.h.collected++; f.h.mu.Unlock() }
func (f fakeMetrics) VersionRebuild(reason, outcome string) {
	f.h.record(&f.h.rebuilds, reason+" "+outcome)
}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

func validName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: function name %q", errdefs.ErrInvalid, name)
	}
	return nil
}

func newHarness(t *testing.T, keep int) *harness {
	t.Helper()
	dir := t.TempDir()
	db, err := catalog.Open(filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	h := &harness{t: t, db: db, dir: dir, registry: &fakeRegistry{}, inputs: BuildInputs{Image: "image-1", VMM: "fake 1"}}
	h.m = New(Config{Keep: keep}, h.deps())
	return h
}

func (h *harness) deps() Deps {
	return Deps{Catalog: h.db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: fakeMetrics{h}, Registry: h.registry,
		ValidName: validName,
		GetFunction: func(ctx context.Context, name string) (*catalog.Function, error) {
			if err := validName(name); err != nil {
				return nil, err
			}
			return h.db.GetFunction(ctx, name)
		},
		PublishVersion: func(ctx context.Context, p catalog.Publish) (*catalog.Version, error) {
			if h.publishErr != nil {
				return nil, h.publishErr
			}
			return h.db.PublishVersion(ctx, p)
		},
		Boot: h.boot, CreateSnapshot: h.createSnapshot, DeleteSnapshot: h.deleteSnapshot,
		DeleteVM:       func(_ context.Context, id string) error { h.record(&h.deletedVMs, id); return nil },
		CheckPrepare:   func(string, json.RawMessage) error { return h.prepareErr },
		Prepare:        h.prepare,
		AutoPush:       func(_ context.Context, id string) { h.record(&h.pushed, id) },
		BuildInputs:    func() BuildInputs { return h.inputs },
		StartOperation: h.startOperation,
		Phase:          func(context.Context, string) {},
		SubProgress:    func(ctx context.Context, _ string) context.Context { return ctx },
		TraceDeploy: func(ctx context.Context, _ string) (context.Context, func(error)) {
			return ctx, func(err error) { h.mu.Lock(); h.spanErrs = append(h.spanErrs, err); h.mu.Unlock() }
		},
	}
}

func (h *harness) record(list *[]string, s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	*list = append(*list, s)
}

func (h *harness) next(prefix string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return fmt.Sprintf("%s-%012d", prefix, h.seq)
}

func (h *harness) boot(_ context.Context, fn *catalog.Function, version int) (*catalog.VM, error) {
	if h.bootErr != nil {
		return nil, h.bootErr
	}
	h.checkVersion("booted", version)
	h.mu.Lock()
	h.booted = append(h.booted, fn)
	h.mu.Unlock()
	vm := &catalog.VM{ID: h.next("vm"), Function: fn.Name, BootMS: 42}
	h.vms.Store(vm.ID, bootedVM{fn, version})
	return vm, nil
}

// checkVersion checks that a boot or prepare is a deploy's (version -1)
// or, while rebuilding, a version's, and records the rebuilt ones.
func (h *harness) checkVersion(what string, version int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case !h.rebuilding && version != -1:
		h.t.Errorf("a deploy %s version %d, want -1", what, version)
	case h.rebuilding && version < 1:
		h.t.Errorf("a rebuild %s version %d", what, version)
	case h.rebuilding:
		h.rebuilt = append(h.rebuilt, version)
	}
}

// startOperation runs an operation's work at once, recording what it was
// and how it ended.
func (h *harness) startOperation(ctx context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) error {
	if h.startErr != nil {
		return h.startErr
	}
	h.record(&h.ops, kind+" "+target)
	res, err := work(ctx)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.opErrs, h.opResults = append(h.opErrs, err), append(h.opResults, res)
	return nil
}

// snapshotOf enters a pending snapshot of fn, as the daemon's snapshot
// does for a deploy's VM.
func (h *harness) snapshotOf(ctx context.Context, fn *catalog.Function, parent string) (*catalog.Snapshot, error) {
	return h.snapshotOfVersion(ctx, fn, -1, parent)
}

// snapshotOfVersion enters a snapshot of a version of fn (-1: pending, a
// deploy's).
func (h *harness) snapshotOfVersion(ctx context.Context, fn *catalog.Function, version int, parent string) (*catalog.Snapshot, error) {
	id := h.next("snap")
	sn := &catalog.Snapshot{ID: id, Function: fn.Name, Dir: filepath.Join(h.dir, "snapshots", id), Version: version,
		Parent: parent, CreatedAt: time.Now()}
	if err := os.MkdirAll(sn.Dir, 0o700); err != nil {
		return nil, err
	}
	if err := h.db.PutSnapshot(ctx, sn); err != nil {
		return nil, err
	}
	if version == -1 {
		h.m.AddPending(id, fn)
	}
	return sn, nil
}

func (h *harness) createSnapshot(ctx context.Context, vmID string) (*catalog.Snapshot, error) {
	vm, ok := h.vms.Load(vmID)
	if !ok {
		return nil, fmt.Errorf("vm %s: %w", vmID, errdefs.ErrNotFound)
	}
	return h.snapshotOfVersion(ctx, vm.(bootedVM).fn, vm.(bootedVM).version, "")
}

func (h *harness) deleteSnapshot(ctx context.Context, id string) error {
	sn, err := h.db.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	if err := h.db.DeleteSnapshot(ctx, id); err != nil {
		return err
	}
	h.record(&h.deleted, id)
	return os.RemoveAll(sn.Dir)
}

func (h *harness) prepare(ctx context.Context, fn *catalog.Function, version int, record json.RawMessage) (*wire.PrepareResult, error) {
	h.checkVersion("prepared", version)
	h.mu.Lock()
	h.records = append(h.records, record)
	h.mu.Unlock()
	clean, err := h.snapshotOfVersion(ctx, fn, version, "")
	if err != nil {
		return nil, err
	}
	warm, err := h.snapshotOfVersion(ctx, fn, version, clean.ID)
	if err != nil {
		return nil, err
	}
	res := &wire.PrepareResult{Function: fn.Name, Clean: &wire.Snapshot{ID: clean.ID}, Warm: &wire.Snapshot{ID: warm.ID}}
	res.Timing.BootMS, res.Timing.CleanSnapshotMS = 40, 5
	return res, nil
}

// code is a staged function: digest is its code's content.
type code struct {
	h        *harness
	name     string
	digest   string
	buildErr error
	gate     chan struct{} // if set, Build waits for it
	started  chan struct{} // if set, closed when Build starts
	dir      string        // the code directory built
	held     bool          // the dependency layer is held
	released int           // done calls
	discards int
}

func (c *code) Build(context.Context) (*catalog.Function, func(), error) {
	if c.started != nil {
		close(c.started)
	}
	if c.gate != nil {
		<-c.gate
	}
	if c.buildErr != nil {
		return nil, nil, c.buildErr
	}
	c.dir = filepath.Join(c.h.dir, "functions", c.h.next(c.name))
	if err := os.MkdirAll(filepath.Join(c.dir, "code"), 0o700); err != nil {
		return nil, nil, err
	}
	c.held = true
	fn := &catalog.Function{Name: c.name, Digest: c.digest, CodeDir: filepath.Join(c.dir, "code"), MemoryMiB: 128, VCPUs: 1, CreatedAt: time.Now()}
	return fn, func() { c.held = false; c.released++ }, nil
}

func (c *code) Discard() { c.discards++ }

func (h *harness) request(c *code) DeployRequest {
	return DeployRequest{Name: c.name, Stage: func(context.Context, *catalog.Function) (Code, error) { return c, nil }}
}

// deploy deploys function name with code of digest.
func (h *harness) deploy(name, digest string) (*wire.Deploy, *code) {
	h.t.Helper()
	c := &code{h: h, name: name, digest: digest}
	res, err := h.m.Deploy(context.Background(), h.request(c))
	if err != nil {
		h.t.Fatalf("deploy %s (%s): %v", name, digest, err)
	}
	return res, c
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, os.ErrNotExist)
}
