package vms

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/polltest"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
)

// helperEnv makes the test binary a stand-in for a VMM a dead daemon left
// (reconcile_test.go): it sleeps, its command line naming a VM.
const helperEnv = "THAW_VMS_TEST_HELPER"

// uidBase starts the user ids the tests' VMMs run as (the daemon's default).
const uidBase = 1879048192

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "sleep" {
		time.Sleep(time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fixture is a Manager on the fake VMM, with fakes of its Deps.
type fixture struct {
	m  *Manager
	b  *vmmtest.Fake
	db *catalog.DB
	fn *catalog.Function

	admitted, released atomic.Int32
	refuse             atomic.Pointer[error]

	mu        sync.Mutex
	forgotten []string
	spans     []string
}

func newFixture(t *testing.T, edit func(*Config)) *fixture {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("VM set-up (users, network namespaces) needs root")
	}
	img, data := t.TempDir(), t.TempDir()
	if err := vmmtest.WriteImage(img); err != nil {
		t.Fatal(err)
	}
	im, err := guestimage.Load(img)
	if err != nil {
		t.Fatal(err)
	}
	db, err := catalog.Open(filepath.Join(data, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{DataDir: data, RunDir: filepath.Join(data, "run"), ResultsDir: filepath.Join(data, "results"),
		BootTimeout: 5 * time.Second, MaxLogBytes: 1 << 16, ConsoleLogLimit: 1 << 20, UIDBase: uidBase, UIDCount: 16, MemoryOverheadMiB: 384,
		CPUWeight: 100}
	if edit != nil {
		edit(&cfg)
	}
	f := &fixture{b: &vmmtest.Fake{}, db: db, fn: &catalog.Function{Name: "echo", MemoryMiB: 128, VCPUs: 1,
		Disk: filepath.Join(data, "code.img")}}
	f.m = New(cfg, f.deps(im))
	if err := f.m.OpenHost(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		f.m.StopAll(context.Background(), catalog.StateStopped, "test over")
		f.m.Wait()
		f.m.ReleaseHost()
		db.Close()
	})
	return f
}

func (f *fixture) deps(im *guestimage.Image) Deps {
	return Deps{Catalog: f.db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), VMM: f.b, Image: im,
		Host:         func() (vmm.Accel, int) { return vmm.AccelTCG, 0 },
		AttachDeps:   func(*vmm.Spec, *catalog.Function) {},
		CheckLayer:   func(*catalog.Function) error { return nil },
		CheckBootEnv: func(context.Context, *catalog.Function, *agent.Conn) error { return nil },
		Admit: func(context.Context, *catalog.Function) (func(), error) {
			f.admitted.Add(1)
			var once sync.Once
			return func() { once.Do(func() { f.released.Add(1) }) }, nil
		},
		Refuse: func(string) error {
			if err := f.refuse.Load(); err != nil {
				return *err
			}
			return nil
		},
		MarkIdle: func(...*catalog.VM) {},
		ForgetPooled: func(id string) {
			f.mu.Lock()
			f.forgotten = append(f.forgotten, id)
			f.mu.Unlock()
		},
		Spans: fakeSpans{f}}
}

// fakeSpans records the names of the spans ended.
type fakeSpans struct{ f *fixture }

func (s fakeSpans) end(name string) {
	s.f.mu.Lock()
	s.f.spans = append(s.f.spans, name)
	s.f.mu.Unlock()
}

func (s fakeSpans) Boot(ctx context.Context, _ string) (context.Context, func(string, error)) {
	return ctx, func(string, error) { s.end("boot") }
}

func (s fakeSpans) VMMStart(ctx context.Context, _, _ string) (context.Context, func(error)) {
	return ctx, func(error) { s.end("vmm start") }
}

func (s fakeSpans) Teardown(_ context.Context, _, _, state, _ string) func() {
	return func() { s.end("teardown " + state) }
}

func (f *fixture) boot(t *testing.T) *catalog.VM {
	t.Helper()
	v, err := f.m.Boot(context.Background(), f.fn, 0)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (f *fixture) record(t *testing.T, id string) *catalog.VM {
	t.Helper()
	v, err := f.db.GetVM(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	polltest.Until(t, 5*time.Second, what, cond)
}

// A booted VM runs confined (a user of its own, an empty network
// namespace) and is live; stopping it kills its VMM, frees its user id,
// run directory and admitted room, and records the state.
func TestBootThenStopFreesEverything(t *testing.T) {
	f := newFixture(t, nil)
	v := f.boot(t)
	if v.State != catalog.StateRunning || v.PID == 0 || v.BootMS <= 0 {
		t.Fatalf("booted vm %+v", v)
	}
	lv, ok := f.m.Live(v.ID)
	if !ok || f.m.State(lv) != catalog.StateRunning || !lv.Shared || lv.MemPath == "" {
		t.Fatalf("live %v, state %q, shared %v", ok, f.m.State(lv), lv.Shared)
	}
	sp := f.b.Spec(0)
	if sp.User == nil || sp.User.UID != uidBase || !sp.EmptyNetNS || sp.ConsoleLimit != 1<<20 {
		t.Fatalf("spec user %+v, empty netns %v, console limit %d", sp.User, sp.EmptyNetNS, sp.ConsoleLimit)
	}
	if live, uids := f.m.Count(); live != 1 || uids != 1 {
		t.Fatalf("%d live, %d uids", live, uids)
	}
	f.m.Stop(context.Background(), lv, catalog.StateStopped, "done")
	f.m.Stop(context.Background(), lv, catalog.StateFailed, "again") // a second stop does nothing
	if _, ok := f.m.Live(v.ID); ok {
		t.Fatal("stopped vm still live")
	}
	if r := f.record(t, v.ID); r.State != catalog.StateStopped || r.Reason != "done" || r.PID != 0 {
		t.Fatalf("record after stop: %s %q pid %d", r.State, r.Reason, r.PID)
	}
	if _, err := os.Stat(v.RunDir); !os.IsNotExist(err) {
		t.Errorf("run dir %s: %v", v.RunDir, err)
	}
	if live, uids := f.m.Count(); live != 0 || uids != 0 {
		t.Errorf("after stop: %d live, %d uids", live, uids)
	}
	if f.admitted.Load() != 1 || f.released.Load() != 1 {
		t.Errorf("admitted %d, released %d", f.admitted.Load(), f.released.Load())
	}
	waitFor(t, "the vmm process gone", func() bool { return procstat.Exited(v.PID) })
	f.mu.Lock()
	defer f.mu.Unlock()
	if want := []string{"vmm start", "boot", "teardown stopped"}; !slices.Equal(f.spans, want) {
		t.Errorf("spans %q, want %q", f.spans, want)
	}
}

// A VMM that dies on its own fails its VM with the exit's reason, and
// what it held is freed.
func TestCrashedVMFailsWithItsReason(t *testing.T) {
	f := newFixture(t, nil)
	v := f.boot(t)
	lv, _ := f.m.Live(v.ID)
	p, err := os.FindProcess(v.PID)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the crash recorded", func() bool { return f.record(t, v.ID).State == catalog.StateFailed })
	r := f.record(t, v.ID)
	if r.State != catalog.StateFailed || r.Reason == "" || r.Reason != lv.M.Exit().Reason || r.PID != 0 {
		t.Fatalf("crashed vm: %s %q pid %d (exit %q)", r.State, r.Reason, r.PID, lv.M.Exit().Reason)
	}
	if live, uids := f.m.Count(); live != 0 || uids != 0 || f.released.Load() != 1 {
		t.Errorf("after the crash: %d live, %d uids, %d released", live, uids, f.released.Load())
	}
}

// Each live VM has a user id of its own from the range; when the range is
// used up a start fails (its room given back) until a VM stops.
func TestUserIDsRunOut(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.UIDCount = 2 })
	a, b := f.boot(t), f.boot(t)
	uids := []uint32{f.b.Spec(0).User.UID, f.b.Spec(1).User.UID}
	if uids[0] == uids[1] || uids[0] < uidBase || uids[1] > uidBase+1 {
		t.Fatalf("uids %v", uids)
	}
	_, err := f.m.Boot(context.Background(), f.fn, 0)
	if !errors.Is(err, errdefs.ErrVMFailed) {
		t.Fatalf("third boot: %v", err)
	}
	if f.admitted.Load() != 3 || f.released.Load() != 1 {
		t.Errorf("admitted %d, released %d", f.admitted.Load(), f.released.Load())
	}
	lv, _ := f.m.Live(a.ID)
	f.m.Stop(context.Background(), lv, catalog.StateStopped, "room")
	f.boot(t)
	if got := f.b.Spec(len(f.b.Specs()) - 1).User.UID; got != uids[0] {
		t.Errorf("the freed uid %d was not reused: %d", uids[0], got)
	}
	if _, ok := f.m.Live(b.ID); !ok {
		t.Error("the other vm is gone")
	}
}

// A start the daemon refuses (closing, its function deleted) starts no
// VMM and gives its room back.
func TestRefusedStart(t *testing.T) {
	f := newFixture(t, nil)
	refused := errors.New("refused")
	f.refuse.Store(&refused)
	if _, err := f.m.Boot(context.Background(), f.fn, 0); !errors.Is(err, refused) {
		t.Fatalf("boot: %v", err)
	}
	if n := len(f.b.Specs()); n != 0 || f.released.Load() != 1 {
		t.Errorf("%d vmms started, %d released", n, f.released.Load())
	}
}

// A guest whose function cannot be imported fails the boot as an import
// error, and the VM is not left running.
func TestBootOfAnUnimportableFunction(t *testing.T) {
	f := newFixture(t, nil)
	f.b.SetFunctionError("SyntaxError", "invalid syntax", "Traceback ...\n")
	_, err := f.m.Boot(context.Background(), f.fn, 0)
	if !errors.Is(err, errdefs.ErrImport) || !errors.Is(err, errdefs.ErrVMFailed) {
		t.Fatalf("boot: %v", err)
	}
	vms, err := f.m.List(context.Background())
	if err != nil || len(vms) != 1 || vms[0].State != catalog.StateFailed || vms[0].Live() {
		t.Fatalf("vms %+v %v", vms, err)
	}
	if live, _ := f.m.Count(); live != 0 {
		t.Errorf("%d live", live)
	}
}

// Pause and resume move a VM between running and paused, and only from
// the state each expects.
func TestPauseResume(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	v := f.boot(t)
	if _, err := f.m.Resume(ctx, v.ID); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("resume of a running vm: %v", err)
	}
	if p, err := f.m.Pause(ctx, v.ID); err != nil || p.State != catalog.StatePaused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	if r, err := f.m.Resume(ctx, v.ID); err != nil || r.State != catalog.StateRunning {
		t.Fatalf("resume: %+v %v", r, err)
	}
	if _, err := f.m.Pause(ctx, "vm-nothex"); !errors.Is(err, errdefs.ErrInvalid) {
		t.Errorf("malformed id: %v", err)
	}
	if _, err := f.m.Pause(ctx, "vm-0123456789ab"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown id: %v", err)
	}
}

// RunningInvocation reports the invocation a VM serves.
func TestRunningInvocation(t *testing.T) {
	f := newFixture(t, nil)
	v := f.boot(t)
	if r := f.m.RunningInvocation(v.ID); r != nil {
		t.Fatalf("idle vm serves %+v", r)
	}
	lv, _ := f.m.Live(v.ID)
	lv.Running.Store(&Running{ID: "inv-1", Started: time.Now(), Timeout: 3 * time.Second})
	r := f.m.RunningInvocation(v.ID)
	if r == nil || r.ID != "inv-1" || r.TimeoutMS != 3000 || r.RunningMS < 0 {
		t.Fatalf("running %+v", r)
	}
}
