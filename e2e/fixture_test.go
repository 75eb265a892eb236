package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// The shared fixture: one daemon with one function, one booted VM and one
// snapshot of it, made by the first test that asks and used by every test
// that only reads it or restores from it. Tests that damage, delete or
// stop things make their own (a copy of the snapshot, or a daemon of
// their own). Booting under TCG takes about 10 s, so sharing it keeps the
// suite affordable without making tests depend on each other's order.

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	for i := len(shared.cleanups) - 1; i >= 0; i-- {
		shared.cleanups[i]()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// shared holds what outlives the test that made it.
var shared struct {
	mu       sync.Mutex
	cleanups []func()
}

// sharedTB is the test that makes a shared fixture, except that cleanups
// wait for the end of the whole run.
type sharedTB struct{ testing.TB }

func (sharedTB) Cleanup(f func()) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	shared.cleanups = append(shared.cleanups, f)
}

// booted is the fixture.
type booted struct {
	e      *env
	host   int // a loopback service the function may reach
	vm     *client.VM
	snap   *client.Snapshot
	memSHA string // the snapshot memory file's hash when it was taken
}

var (
	bootOnce sync.Once
	bootFix  *booted
	bootErr  error
)

// bootedFixture returns the fixture and a client whose answers are checked
// for t.
func bootedFixture(t *testing.T) (*booted, *client.Client) {
	t.Helper()
	imageDir(t) // skip without an image, before anything is made
	bootOnce.Do(func() {
		made := false
		defer func() {
			if !made && bootErr == nil {
				bootErr = fmt.Errorf("making the fixture failed in %s", t.Name())
			}
		}()
		bootFix, bootErr = makeBooted(t)
		made = true
	})
	if bootErr != nil {
		t.Fatalf("shared fixture: %v", bootErr)
	}
	return bootFix, bootFix.e.client(t)
}

func makeBooted(t *testing.T) (*booted, error) {
	tb := sharedTB{t}
	dataDir, err := os.MkdirTemp("", "thaw-e2e-fixture-")
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() { os.RemoveAll(dataDir) })
	f := &booted{e: startEnv(tb, dataDir), host: hostService(tb)}
	ctx := ctxT(t)
	c := f.e.c
	fn, err := c.CreateFunctionFromDir(ctx, "probe", repoPath("e2e/testdata/probe"), 256, 1,
		client.WithServices(fmt.Sprintf("127.0.0.1:%d", f.host)))
	if err != nil {
		return nil, fmt.Errorf("create function: %w", err)
	}
	if fn.Digest == "" || fn.MemoryMiB != 256 {
		return nil, fmt.Errorf("function = %+v", fn)
	}
	t.Log("booting the shared VM (TCG: about 10 s)")
	if f.vm, err = c.BootVM(ctx, "probe"); err != nil {
		return nil, fmt.Errorf("boot: %w", err)
	}
	if f.vm.State != "running" || f.vm.BootMS <= 0 || f.vm.Accel == "" {
		return nil, fmt.Errorf("booted vm = %+v", f.vm)
	}
	t.Logf("boot to agent ready: %.0f ms", f.vm.BootMS)
	if f.snap, err = c.CreateSnapshot(ctx, f.vm.ID); err != nil {
		return nil, fmt.Errorf("snapshot: %w", err)
	}
	t.Logf("snapshot: %.0f ms (VM paused %.0f ms), %d MiB on disk", f.snap.CreateMS, f.snap.PauseMS, f.snap.DiskBytes>>20)
	mem, err := snapshot.HashFile(filepath.Join(f.snap.Dir, snapshot.MemoryFile))
	if err != nil {
		return nil, err
	}
	if mem.Allocated >= mem.Size {
		return nil, fmt.Errorf("memory file is not sparse: %d allocated of %d", mem.Allocated, mem.Size)
	}
	f.memSHA = mem.SHA256
	return f, nil
}

// clone restores a VM from the fixture's snapshot (vanilla).
func (f *booted) clone(t *testing.T, c *client.Client) *client.VM {
	t.Helper()
	v, err := c.RestoreVM(ctxT(t), f.snap.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	return v
}
