package adaptive

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/catalog/catalogtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// world is the adaptive restore on fakes of the daemon: a real catalog in
// a temporary directory, snapshots with a sealed manifest, strategies
// whose artifacts are a file "set" holding a generation number, and
// operations run in goroutines the test can wait for.
type world struct {
	t       *testing.T
	db      *catalog.DB
	dir     string
	m       *Manager
	metrics *fakeMetrics
	ops     *fakeOps
	art     *fakeArtifacts
	queued  int
	// refreshErr, if set, fails every strategy's Refresh.
	refreshErr error
	prepares   []prepareCall
	recorded   []string // the record input of each Refresh
	mu         sync.Mutex
}

type prepareCall struct {
	ref         string
	event       string
	fromTraffic bool
}

// newWorld is a world offering vanilla (not auto), then reap, snapbpf and
// faasnap (reap and faasnap record, snapbpf is lazy).
func newWorld(t *testing.T, cfg Config) *world {
	t.Helper()
	dir := t.TempDir()
	db := catalogtest.Open(t, dir)
	w := &world{t: t, db: db, dir: dir, metrics: &fakeMetrics{counts: map[string]int{}}, ops: &fakeOps{}}
	w.art = &fakeArtifacts{}
	sts := []restore.Strategy{{Kind: restore.Vanilla}, w.strategy(restore.REAP, 2, false), w.strategy(restore.SnapBPF, 3, true),
		w.strategy(restore.FaaSnap, 1, false)}
	strategy := func(name string) (restore.Strategy, error) {
		for _, st := range sts {
			if string(st.Kind) == name {
				return st, nil
			}
		}
		return restore.Strategy{}, fmt.Errorf("%w: restore strategy %q is not offered by this daemon", errdefs.ErrInvalid, name)
	}
	l, b := lookup{w}, background{w}
	w.m = New(cfg, Deps{Catalog: db, Metrics: w.metrics, Artifacts: w.art, GetFunction: l.GetFunction, GetSnapshot: l.GetSnapshot,
		ParseRef: l.ParseRef, Resolve: l.Resolve, NewestSnapshot: l.NewestSnapshot, StrategySnapshot: l.StrategySnapshot,
		StartOperation: b.StartOperation, Prepare: b.Prepare, DropStandby: w.art.dropStandby,
		RecordHost: func(function string, event json.RawMessage) restore.RecordHost {
			return recordHost{fn: function, event: string(event)}
		},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Strategies: sts, Strategy: strategy, RemoteStrategy: restore.SnapBPF,
		Store: func() *store.Store { return nil }, Queued: func() int { return w.queued },
		CheckEvent: func(ev json.RawMessage) error {
			if len(ev) > 0 && !json.Valid(ev) {
				return fmt.Errorf("%w: event is not valid JSON", errdefs.ErrInvalid)
			}
			return nil
		}})
	return w
}

// strategy is an auto strategy of kind k whose artifacts are the file
// "set" (ready when it exists); it records and refreshes a set.
func (w *world) strategy(k restore.Kind, order int, lazy bool) restore.Strategy {
	return restore.Strategy{Kind: k, Auto: true, AutoOrder: order, Lazy: lazy,
		Ready: func(snap restore.Snapshot, _ restore.Env) bool {
			_, err := os.Stat(filepath.Join(snap.ArtifactDir(k), "set"))
			return err == nil
		},
		Record: func(context.Context, restore.RecordHost, *restore.Prepare) error { return nil },
		Refresh: func(_ context.Context, h restore.RecordHost, snap restore.Snapshot, dir string, _ restore.RecordOptions) (restore.RefreshBuild, error) {
			if w.refreshErr != nil {
				return restore.RefreshBuild{}, w.refreshErr
			}
			w.mu.Lock()
			w.recorded = append(w.recorded, h.(recordHost).event)
			w.mu.Unlock()
			gen := readGen(filepath.Join(snap.ArtifactDir(k), "set")) + 1
			return restore.RefreshBuild{Pages: uint64(100 + gen)}, writeGen(dir, gen)
		}}
}

func writeGen(dir string, gen int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "set"), []byte(strconv.Itoa(gen)), 0o600)
}

func readGen(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(string(b))
	return n
}

// function creates fn in the catalog.
func (w *world) function(name string) *catalog.Function {
	w.t.Helper()
	f := &catalog.Function{Name: name, Digest: hexOf(name), CodeDir: filepath.Join(w.dir, name), MemoryMiB: 256, VCPUs: 1,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := w.db.PutFunction(context.Background(), f); err != nil {
		w.t.Fatal(err)
	}
	got, err := w.db.GetFunction(context.Background(), name)
	if err != nil {
		w.t.Fatal(err)
	}
	return got
}

// snapshot creates a snapshot of fn's version with a sealed manifest and
// generation 1 of the artifacts of kinds.
func (w *world) snapshot(fn string, version int, remote bool, kinds ...restore.Kind) *catalog.Snapshot {
	w.t.Helper()
	id := fmt.Sprintf("snap-%012d", time.Now().UnixNano()%1e12)
	dir := filepath.Join(w.dir, "snapshots", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		w.t.Fatal(err)
	}
	m := &snapshot.Manifest{ID: id, Function: fn, CreatedAt: time.Now().UTC(),
		Guest: snapshot.Guest{MemoryMiB: 256, VCPUs: 1, Machine: "pc", Cmdline: "console=ttyS0"},
		VMM:   snapshot.VMM{Name: "qemu", Version: "7.2.22", Accel: "tcg"},
		Inputs: snapshot.Inputs{Kernel: snapshot.Digest{SHA256: hexOf("kernel")}, Initrd: snapshot.Digest{SHA256: hexOf("initrd")},
			Rootfs: snapshot.Digest{SHA256: hexOf("rootfs")}, Function: snapshot.Digest{SHA256: hexOf(fn)}},
		Files: map[string]snapshot.FileInfo{snapshot.StateFile: {Size: 1 << 20, SHA256: hexOf("state")},
			snapshot.MemoryFile: {Size: 256 << 20, SHA256: hexOf("memory")}}}
	b, err := m.Encode()
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, snapshot.ManifestFile), b, 0o600); err != nil {
		w.t.Fatal(err)
	}
	for _, k := range kinds {
		if err := writeGen(filepath.Join(dir, "strategies", string(k)), 1); err != nil {
			w.t.Fatal(err)
		}
	}
	sn := &catalog.Snapshot{ID: id, Function: fn, Dir: dir, MemoryMiB: 256, CreatedAt: time.Now(), RemoteMemory: remote, Version: version}
	if err := w.db.PutSnapshot(context.Background(), sn); err != nil {
		w.t.Fatal(err)
	}
	time.Sleep(time.Microsecond) // the next id differs
	return sn
}

func hexOf(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// cold is an answered cold start of fn's version on snapshot sn restored
// with strategy, whose guest touched outside of its set (0-1) of its pages.
func (w *world) cold(sn *catalog.Snapshot, strategy string, totalMS, outside float64) Observation {
	inv := &wire.Invocation{Function: sn.Function, Strategy: strategy, OK: true,
		Timing: wire.Timing{TotalMS: totalMS, Restore: &wire.RestoreTiming{SetupMS: totalMS / 2, Source: "local", VMM: "started"}}}
	if sn.RemoteMemory {
		inv.Timing.Restore.Source = "registry"
	}
	inv.StrategyStats = &wire.StrategyStats{}
	if outside > 0 {
		inv.StrategyStats.SetPages, inv.StrategyStats.SetOutsideRatio = 100, outside
	}
	return Observation{Inv: inv, Event: json.RawMessage(`{"from":"traffic"}`), Snapshot: sn.ID, Version: max(sn.Version, 0)}
}

// doc is fn's restore document's only version.
func (w *world) doc(fn string) wire.RestoreVersion {
	w.t.Helper()
	doc, err := w.m.FunctionRestore(context.Background(), fn)
	if err != nil || len(doc.Versions) != 1 {
		w.t.Fatalf("restore document %+v: %v", doc, err)
	}
	return doc.Versions[0]
}

// lookup is the daemon's lookups: the catalog's, NAME or NAME:VERSION
// references, the newest snapshot by creation.
type lookup struct{ w *world }

func (l lookup) GetFunction(ctx context.Context, name string) (*catalog.Function, error) {
	return l.w.db.GetFunction(ctx, name)
}

func (l lookup) GetSnapshot(ctx context.Context, id string) (*catalog.Snapshot, error) {
	return l.w.db.GetSnapshot(ctx, id)
}

func (l lookup) ParseRef(ref string) (versions.Ref, error) {
	r, err := versions.ParseRef(ref)
	if err != nil {
		return r, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
	}
	return r, nil
}

// Resolve is the version a reference names; a function's own
// configuration (0) without one.
func (l lookup) Resolve(ctx context.Context, r versions.Ref) (int, error) {
	if _, err := l.w.db.GetFunction(ctx, r.Function); err != nil {
		return 0, err
	}
	return r.Version, nil
}

func (l lookup) NewestSnapshot(ctx context.Context, function string, version int) (string, error) {
	snaps, err := l.w.db.ListSnapshots(ctx, function)
	if err != nil {
		return "", err
	}
	for i := len(snaps) - 1; i >= 0; i-- {
		if snaps[i].Version == version {
			return snaps[i].ID, nil
		}
	}
	return "", fmt.Errorf("%w: no snapshot of %s:%d", errdefs.ErrConflict, function, version)
}

func (l lookup) StrategySnapshot(sn *catalog.Snapshot) (restore.Snapshot, error) {
	m, err := snapshot.ReadManifest(sn.Dir)
	if err != nil {
		return restore.Snapshot{}, err
	}
	return restore.Snapshot{Dir: sn.Dir, Manifest: m}, nil
}

// background runs operations in goroutines and prepares by recording the
// call and making a warm snapshot.
type background struct{ w *world }

func (b background) StartOperation(_ context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (string, error) {
	return b.w.ops.start(kind, target, work), nil
}

func (b background) Prepare(_ context.Context, ref string, event json.RawMessage, fromTraffic bool) (*wire.PrepareResult, error) {
	b.w.mu.Lock()
	b.w.prepares = append(b.w.prepares, prepareCall{ref: ref, event: string(event), fromTraffic: fromTraffic})
	b.w.mu.Unlock()
	fn, _, _ := strings.Cut(ref, ":")
	warm := b.w.snapshot(fn, 0, false, restore.REAP)
	return &wire.PrepareResult{Warm: &wire.Snapshot{ID: warm.ID}}, nil
}

// fakeOps runs operations in goroutines, keeping their outcomes.
type fakeOps struct {
	mu  sync.Mutex
	wg  sync.WaitGroup
	ops []*fakeOp
}

type fakeOp struct {
	id, kind, target string
	res              *wire.OperationResult
	err              error
}

func (o *fakeOps) start(kind, target string, work func(context.Context) (*wire.OperationResult, error)) string {
	o.mu.Lock()
	op := &fakeOp{id: fmt.Sprintf("op-%012d", len(o.ops)+1), kind: kind, target: target}
	o.ops = append(o.ops, op)
	o.mu.Unlock()
	o.wg.Add(1)
	go func() {
		defer o.wg.Done()
		res, err := work(context.Background())
		o.mu.Lock()
		op.res, op.err = res, err
		o.mu.Unlock()
	}()
	return op.id
}

// wait waits for every operation started and returns them.
func (o *fakeOps) wait() []*fakeOp {
	o.wg.Wait()
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*fakeOp(nil), o.ops...)
}

// fakeArtifacts builds in a staging directory beside the artifacts and
// swaps by renames.
type fakeArtifacts struct {
	mu       sync.Mutex
	swapped  []string // snapshot/strategy, in the order swapped
	trusted  []string // the artifact directories trusted
	leftover int
}

// recordHost is the host a refresh records on: its function and input.
type recordHost struct{ fn, event string }

func (recordHost) Restore(context.Context, restore.Snapshot, restore.BeginFunc) (restore.RecordVM, error) {
	return nil, errors.New("the fake host restores nothing")
}

func (a *fakeArtifacts) Staging(snapDir string, kind restore.Kind, op string) string {
	return filepath.Join(snapDir, ".staging-"+string(kind)+"-"+op)
}

func (a *fakeArtifacts) Swap(snapDir string, kind restore.Kind, staging string) error {
	cur := filepath.Join(snapDir, "strategies", string(kind))
	if err := os.RemoveAll(cur); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(cur), 0o700); err != nil {
		return err
	}
	return os.Rename(staging, cur)
}

func (a *fakeArtifacts) Trust(snapDir string, kind restore.Kind) {
	a.mu.Lock()
	a.trusted = append(a.trusted, filepath.Join(snapDir, "strategies", string(kind)))
	a.mu.Unlock()
}

// dropStandby is the daemon's drop of the standby VMs holding a swapped
// set: it records the swap.
func (a *fakeArtifacts) dropStandby(id string, kind restore.Kind) {
	a.mu.Lock()
	a.swapped = append(a.swapped, id+"/"+string(kind))
	a.mu.Unlock()
}

func (a *fakeArtifacts) RemoveStaging() (int, error) { return a.leftover, nil }

// fakeMetrics counts each call by its labels.
type fakeMetrics struct {
	mu     sync.Mutex
	counts map[string]int
}

func (f *fakeMetrics) add(key string) {
	f.mu.Lock()
	f.counts[key]++
	f.mu.Unlock()
}

func (f *fakeMetrics) count(key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[key]
}

func (f *fakeMetrics) RestoreChoice(strategy, location, how string) {
	f.add("choice " + strategy + " " + location + " " + how)
}

func (f *fakeMetrics) SetUse(strategy string, ratio float64) {
	f.add(fmt.Sprintf("setuse %s %.2f", strategy, ratio))
}

func (f *fakeMetrics) WorkingSetRefresh(strategy, source, outcome string) {
	f.add("refresh " + strategy + " " + source + " " + outcome)
}

func (f *fakeMetrics) BackgroundPrepare(outcome string) { f.add("prepare " + outcome) }
