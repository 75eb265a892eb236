package lifecycle

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// fakeDaemon is the rest of the daemon as the component sees it: a real
// catalog in a temporary directory, and fakes of the VMs, pools, gates
// and snapshots that record what the component asked of them.
type fakeDaemon struct {
	t   *testing.T
	db  *catalog.DB
	dir string

	mu      sync.Mutex
	live    map[string]liveFake // VMs with a VMM, by id
	kept    map[string]bool     // VMs idle in the keep-alive pool
	stored  map[string]bool     // snapshots with a memory store copy
	gates   map[string]*sync.RWMutex
	dropped []string        // functions whose pooled VMs were retired
	ended   []string        // VMs EndVM stopped
	deleted []string        // snapshots DeleteSnapshot removed
	kicks   int             // KickDepsGC calls
	cleared []string        // "function:version" ClearStale was called with
	onEndVM func(id string) // called as each VM ends
}

type liveFake struct {
	fn, runDir, invocation string
}

func newFake(t *testing.T) (*Manager, *fakeDaemon) {
	t.Helper()
	dir := t.TempDir()
	db, err := catalog.Open(filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	f := &fakeDaemon{t: t, db: db, dir: dir, live: map[string]liveFake{}, kept: map[string]bool{}, stored: map[string]bool{},
		gates: map[string]*sync.RWMutex{}}
	m := New(Config{BootTimeout: 2 * time.Second}, f.deps())
	return m, f
}

func (f *fakeDaemon) deps() Deps {
	return Deps{Catalog: f.db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), GetFunction: f.db.GetFunction,
		Live: func(fn string) []LiveVM {
			f.mu.Lock()
			defer f.mu.Unlock()
			var out []LiveVM
			for id, lv := range f.live {
				if lv.fn == fn {
					out = append(out, LiveVM{ID: id, RunDir: lv.runDir, Invocation: lv.invocation})
				}
			}
			return out
		},
		IsLive:  func(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); _, ok := f.live[id]; return ok },
		Running: func(id string) string { f.mu.Lock(); defer f.mu.Unlock(); return f.live[id].invocation },
		Kept: func(fn string) map[string]bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			out := map[string]bool{}
			for id := range f.kept {
				if f.live[id].fn == fn {
					out[id] = true
				}
			}
			return out
		},
		DropPooled:     func(fn string) { f.mu.Lock(); f.dropped = append(f.dropped, fn); f.mu.Unlock() },
		EndVM:          f.endVM,
		Gate:           f.gate,
		Stored:         func(id string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.stored[id] },
		DeleteSnapshot: f.deleteSnapshot,
		KickDepsGC:     func() { f.mu.Lock(); f.kicks++; f.mu.Unlock() },
		ClearStale: func(fn string, v int) {
			f.mu.Lock()
			f.cleared = append(f.cleared, fn+":"+strconv.Itoa(v))
			f.mu.Unlock()
		},
	}
}

// endVM is the daemon's: the VMM goes, with its run directory and record.
func (f *fakeDaemon) endVM(ctx context.Context, id, runDir string) error {
	f.mu.Lock()
	delete(f.live, id)
	delete(f.kept, id)
	f.ended = append(f.ended, id)
	hook := f.onEndVM
	f.mu.Unlock()
	if hook != nil {
		hook(id)
	}
	_ = os.RemoveAll(runDir)
	return f.db.DeleteVM(ctx, id)
}

func (f *fakeDaemon) gate(fn string) *sync.RWMutex {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.gates[fn] == nil {
		f.gates[fn] = &sync.RWMutex{}
	}
	return f.gates[fn]
}

func (f *fakeDaemon) deleteSnapshot(ctx context.Context, id string) error {
	sn, err := f.db.GetSnapshot(ctx, id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	f.deleted = append(f.deleted, id)
	delete(f.stored, id)
	f.mu.Unlock()
	_ = os.RemoveAll(sn.Dir)
	return f.db.DeleteSnapshot(ctx, id)
}

// function records a function with a code directory of its own.
func (f *fakeDaemon) function(name string) *catalog.Function {
	f.t.Helper()
	code := f.dir + "/functions/" + name + "-1/code"
	if err := os.MkdirAll(code, 0o700); err != nil {
		f.t.Fatal(err)
	}
	fn := &catalog.Function{Name: name, Digest: "d-" + name, CodeDir: code, MemoryMiB: 256, VCPUs: 1, CreatedAt: time.Now()}
	if err := f.db.PutFunction(context.Background(), fn); err != nil {
		f.t.Fatal(err)
	}
	return fn
}

// version publishes version n of fn, its code in a directory of its own,
// live routed to it: fn's configuration becomes the version's.
func (f *fakeDaemon) version(fn *catalog.Function, n int) *catalog.Version {
	f.t.Helper()
	fn.CodeDir = f.dir + "/functions/" + fn.Name + "-v" + strconv.Itoa(n) + "/code"
	if err := os.MkdirAll(fn.CodeDir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	v, err := f.db.PublishVersion(context.Background(), catalog.Publish{Function: fn,
		Version: &catalog.Version{Function: fn.Name, Digest: fn.Digest + strconv.Itoa(n), Config: *fn, CreatedAt: time.Now()}, Promote: []string{"live"}})
	if err != nil || v.Number != n {
		f.t.Fatalf("publish version %d: %+v %v", n, v, err)
	}
	return v
}

// vm records a VM of fn in state; with a VMM unless starting.
func (f *fakeDaemon) vm(fn, id, state, invocation string, withVMM bool) {
	f.t.Helper()
	run := filepath.Join(f.dir, "run", id)
	if err := os.MkdirAll(run, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := f.db.PutVM(context.Background(), &catalog.VM{ID: id, Function: fn, State: state, RunDir: run, CreatedAt: time.Now()}); err != nil {
		f.t.Fatal(err)
	}
	if withVMM {
		f.mu.Lock()
		f.live[id] = liveFake{fn: fn, runDir: run, invocation: invocation}
		f.mu.Unlock()
	}
}

// snapshot records a snapshot of fn with a directory.
func (f *fakeDaemon) snapshot(fn, id string, version int, pinned, stored bool) {
	f.t.Helper()
	dir := filepath.Join(f.dir, "snapshots", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		f.t.Fatal(err)
	}
	if err := f.db.PutSnapshot(context.Background(), &catalog.Snapshot{ID: id, Function: fn, Dir: dir, Version: version,
		Pinned: pinned, CreatedAt: time.Now()}); err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	f.stored[id] = stored
	f.mu.Unlock()
}
