package restorer

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// fakeMachine is a VMM process that is this test process (procstat reads
// it); its device state load and resume can be made to fail.
type fakeMachine struct {
	loadErr, resumeErr error
	loaded             string // the device state file loaded
	resumed            bool
	done               chan struct{}
	exit               vmm.Exit
}

func newMachine() *fakeMachine { return &fakeMachine{done: make(chan struct{})} }

func (m *fakeMachine) PID() int                                { return os.Getpid() }
func (m *fakeMachine) Agent() net.Conn                         { return nil }
func (m *fakeMachine) Pause(context.Context) error             { return nil }
func (m *fakeMachine) SaveState(context.Context, string) error { return nil }
func (m *fakeMachine) Kill() error                             { m.end("killed"); return nil }
func (m *fakeMachine) Done() <-chan struct{}                   { return m.done }
func (m *fakeMachine) Exit() vmm.Exit                          { return m.exit }

func (m *fakeMachine) LoadState(_ context.Context, path string) error {
	m.loaded = path
	return m.loadErr
}

func (m *fakeMachine) Resume(context.Context) error {
	m.resumed = true
	return m.resumeErr
}

func (m *fakeMachine) end(reason string) {
	select {
	case <-m.done:
	default:
		m.exit = vmm.Exit{Reason: reason}
		close(m.done)
	}
}

// fakeVM is a live VM: it says whether its lock is held.
type fakeVM struct {
	mu       sync.Mutex
	locked   atomic.Bool
	id       string
	fn       *catalog.Function
	m        *fakeMachine
	sess     restore.Session
	untimed  time.Duration
	resuming bool
	failure  atomic.Pointer[string]
	digests  map[string]string
	renewErr error
	renewals []agent.Renewal
}

func (v *fakeVM) Lock()                                { v.mu.Lock(); v.locked.Store(true) }
func (v *fakeVM) Unlock()                              { v.locked.Store(false); v.mu.Unlock() }
func (v *fakeVM) VMID() string                         { return v.id }
func (v *fakeVM) Function() *catalog.Function          { return v.fn }
func (v *fakeVM) Machine() vmm.Machine                 { return v.m }
func (v *fakeVM) Session() restore.Session             { return v.sess }
func (v *fakeVM) FailStrategy(why string)              { v.failure.Store(&why) }
func (v *fakeVM) StrategyFailure() *string             { return v.failure.Load() }
func (v *fakeVM) SetSecretDigests(d map[string]string) { v.digests = d }

func (v *fakeVM) Attach(sess restore.Session, untimed time.Duration) {
	v.sess, v.untimed = sess, untimed
}

func (v *fakeVM) Resuming(procstat.Counters, faulttrace.Counters, faulttrace.Counters) {
	v.resuming = true
}

func (v *fakeVM) Renew(_ context.Context, rn agent.Renewal) (*agent.Reply, error) {
	v.renewals = append(v.renewals, rn)
	if v.renewErr != nil {
		return nil, v.renewErr
	}
	now := time.Now()
	return &agent.Reply{OK: true, DurationMS: 1, Written: now, Read: now}, nil
}

// fakeSession is a strategy's session.
type fakeSession struct {
	kind     restore.Kind
	fallback string
	startErr error
	failed   chan error
	closed   atomic.Bool
}

func (s *fakeSession) Kind() restore.Kind                 { return s.kind }
func (s *fakeSession) Memory() vmm.Memory                 { return vmm.Memory{Path: "memory"} }
func (s *fakeSession) Untimed() time.Duration             { return 0 }
func (s *fakeSession) Started(context.Context, int) error { return s.startErr }
func (s *fakeSession) Failed() <-chan error {
	if s.failed == nil {
		return nil
	}
	return s.failed
}
func (s *fakeSession) InvocationDone() {}
func (s *fakeSession) Stats() restore.Stats {
	return restore.Stats{Kind: string(s.kind), Fallback: s.fallback}
}
func (s *fakeSession) Close() error { s.closed.Store(true); return nil }

// stop is a VM stopped, in the state and for the reason given.
type stop struct {
	vm            *fakeVM
	state, reason string
	locked        bool // its lock was held when it was stopped
}

// fakeVMs starts fake VMs under a run directory.
type fakeVMs struct {
	mu       sync.Mutex
	runDir   string
	startErr error
	started  []*fakeVM
	stops    []stop
	marks    []string
	// machine, if set, makes each started VM's machine; startHook, if
	// set, sees each VM started.
	machine   func() *fakeMachine
	startHook func(vm *fakeVM)
}

func (f *fakeVMs) BaseSpec(id string, fn *catalog.Function) vmm.Spec {
	return vmm.Spec{ID: id, RunDir: filepath.Join(f.runDir, id), MemoryMiB: fn.MemoryMiB}
}

func (f *fakeVMs) Start(_ context.Context, rec *catalog.VM, spec vmm.Spec, fn *catalog.Function, release func()) (*fakeVM, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		release()
		return nil, f.startErr
	}
	m := newMachine()
	if f.machine != nil {
		m = f.machine()
	}
	vm := &fakeVM{id: rec.ID, fn: fn, m: m}
	if f.startHook != nil {
		f.startHook(vm)
	}
	f.started = append(f.started, vm)
	return vm, nil
}

func (f *fakeVMs) Stop(_ context.Context, vm *fakeVM, state, reason string) {
	f.mu.Lock()
	f.stops = append(f.stops, stop{vm: vm, state: state, reason: reason, locked: vm.locked.Load()})
	f.mu.Unlock()
	vm.m.end(reason)
}

func (f *fakeVMs) Mark(vm *fakeVM, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.marks = append(f.marks, vm.id+" "+state)
}

func (f *fakeVMs) WithAgent(ctx context.Context, _ *fakeVM, _ time.Duration, fn func(context.Context) error) error {
	return fn(ctx)
}

func (f *fakeVMs) stopped() []stop {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stop(nil), f.stops...)
}

// standbyVM is a standby VM of the fake pool.
type standbyVM struct {
	vm   *fakeVM
	rec  *catalog.VM
	plan *Plan
}

// fakePool is the VMM pool.
type fakePool struct {
	mu       sync.Mutex
	size     int
	standby  map[string][]standbyVM // by snapshot/kind
	retired  []string
	refills  []string
	restores atomic.Int64 // restores under way
}

func (p *fakePool) BeginRestore() func()       { p.restores.Add(1); return func() { p.restores.Add(-1) } }
func (p *fakePool) Size(*catalog.Function) int { return p.size }

func (p *fakePool) Take(snapshot string, kind restore.Kind) (*fakeVM, *catalog.VM, *Plan, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := snapshot + "/" + string(kind)
	if len(p.standby[k]) == 0 {
		return nil, nil, nil, false
	}
	sb := p.standby[k][0]
	p.standby[k] = p.standby[k][1:]
	return sb.vm, sb.rec, sb.plan, true
}

func (p *fakePool) Refill(snapshot string, kind restore.Kind, _ *catalog.Function) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refills = append(p.refills, snapshot+"/"+string(kind))
}

func (p *fakePool) Retire(_ context.Context, vm *fakeVM, _ *catalog.VM, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.retired = append(p.retired, vm.id+": "+why)
}

// fakeRegistry has no lazy snapshots.
type fakeRegistry struct{}

func (fakeRegistry) BeginLazy(context.Context, *catalog.Snapshot, restore.BeginFunc, restore.Snapshot,
	restore.Env) (restore.Session, *catalog.Snapshot, time.Duration, error) {
	return nil, nil, 0, errors.New("no registry")
}
func (fakeRegistry) Lazy(restore.Session) bool             { return false }
func (fakeRegistry) Failure(restore.Session, string) error { return nil }

// fakeCatalog records VMs.
type fakeCatalog struct {
	mu  sync.Mutex
	err error
	vms map[string]*catalog.VM
}

func (c *fakeCatalog) PutVM(_ context.Context, vm *catalog.VM) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	cp := *vm
	c.vms[vm.ID] = &cp
	return nil
}

// noSpans traces nothing.
type noSpans struct{}

func (noSpans) Strategy(ctx context.Context, _, _, _ string) (context.Context, func(string, error)) {
	return ctx, func(string, error) {}
}
func (noSpans) Step(ctx context.Context, _ Step, _ Attrs) (context.Context, func(error)) {
	return ctx, func(error) {}
}

// world is a restorer on fakes of all its Deps, with one snapshot of one
// function.
type world struct {
	r        *Restorer[*fakeVM]
	vms      *fakeVMs
	pool     *fakePool
	db       *fakeCatalog
	row      Row
	admitted atomic.Int64 // rooms held
	hits     []string
	verify   error
	// begun are the sessions the strategies began.
	begun []*fakeSession
}

// strategyOf is a strategy of kind that begins a fake session, or fails
// with beginErr; it falls back unless strict.
func (w *world) strategyOf(kind restore.Kind, beginErr error) restore.Strategy {
	return restore.Strategy{Kind: kind, Fallback: true, Begin: func(context.Context, restore.Snapshot, restore.Env) (restore.Session, error) {
		if beginErr != nil {
			return nil, beginErr
		}
		s := &fakeSession{kind: kind}
		w.begun = append(w.begun, s)
		return s, nil
	}}
}

func newWorld(t *testing.T, strategies ...restore.Strategy) *world {
	t.Helper()
	dir := t.TempDir()
	w := &world{vms: &fakeVMs{runDir: filepath.Join(dir, "run")}, pool: &fakePool{standby: map[string][]standbyVM{}},
		db: &fakeCatalog{vms: map[string]*catalog.VM{}}}
	fn := &catalog.Function{Name: "echo", MemoryMiB: 256}
	w.row = Row{Sn: &catalog.Snapshot{ID: "snap-000000000001", Function: "echo", Dir: filepath.Join(dir, "snap")}, Fn: fn}
	if len(strategies) == 0 {
		strategies = []restore.Strategy{w.strategyOf(restore.Vanilla, nil)}
	}
	w.r = New(Config{BootTimeout: time.Second}, Deps[*fakeVM]{
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Catalog: w.db, VMs: w.vms, Pool: w.pool, Registry: fakeRegistry{},
		Strategies: func() []restore.Strategy { return strategies },
		Admit: func(context.Context, *catalog.Function) (func(), error) {
			w.admitted.Add(1)
			var once sync.Once
			return func() { once.Do(func() { w.admitted.Add(-1) }) }, nil
		},
		Row: func(_ context.Context, id string) (Row, error) {
			if id != w.row.Sn.ID {
				return Row{}, errors.New("no such snapshot")
			}
			return w.row, nil
		},
		Verify: func(context.Context, Row) (Row, *snapshot.Manifest, error) {
			if w.verify != nil {
				return Row{}, nil, w.verify
			}
			return w.row, &snapshot.Manifest{ID: w.row.Sn.ID, Guest: snapshot.Guest{Cmdline: "console=ttyS0"}}, nil
		},
		Pin:       func(b restore.BeginFunc) restore.BeginFunc { return b },
		Store:     func() *store.Store { return nil },
		SecretEnv: func(*catalog.Function) ([]agent.EnvVar, map[string]string, error) { return nil, nil, nil },
		Trace:     func(int) faulttrace.Counters { return faulttrace.Counters{} },
		PoolHit: func(kind string, hit bool) {
			w.hits = append(w.hits, map[bool]string{true: "hit ", false: "miss "}[hit]+kind)
		},
		Spans: noSpans{},
	})
	return w
}

// opts are a restore's options with the strategy named.
func (w *world) opts(t *testing.T, name string) Opts {
	t.Helper()
	st, err := w.r.Strategy(name)
	if err != nil {
		t.Fatal(err)
	}
	return Opts{Begin: st.Start, Start: time.Now(), Pool: st.Kind}
}
