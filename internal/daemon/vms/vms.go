// Package vms is the daemon's VMs: the table of VMs with a VMM process,
// starting, supervising and stopping them, their agent connections,
// boots from the guest image, pause and resume, confinement (a user id,
// cgroup and network of their own), deletes, adoption of what a daemon
// that died left, and the daemon's changes to the host.
package vms

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// Config is what the VMs are started and confined with (the daemon's
// configuration, defaults filled).
type Config struct {
	DataDir     string        // the daemon's data directory: its cgroup parent's name and record
	RunDir      string        // where each VM gets its run directory
	ResultsDir  string        // where agent connections spill large results
	BootTimeout time.Duration // start to agent ready
	MaxLogBytes int           // an invocation's output an agent connection keeps
	// ConsoleLogLimit is how many bytes of guest console a VM keeps.
	ConsoleLogLimit int64
	// UIDBase and UIDCount are the user ids VMMs run as, one per live VM.
	UIDBase, UIDCount uint32
	// MemoryOverheadMiB is what a VM's cgroup may use beyond guest RAM.
	MemoryOverheadMiB int
	CPUWeight         int    // a VM's cgroup CPU weight
	CgroupRoot        string // the cgroup file system; "": no VM cgroups
	AllowFullEgress   bool   // functions may declare full egress
}

// Deps is what the VMs need of the rest of the daemon.
type Deps struct {
	Catalog *catalog.DB
	Log     *slog.Logger
	VMM     vmm.Backend
	Image   *guestimage.Image
	// Host is the accelerator VMs run on and the host's TSC frequency in
	// kHz (0: not measured), known once the daemon has started.
	Host func() (accel vmm.Accel, tscKHz int)
	// AttachDeps adds a function's dependency layer to a VM's spec;
	// CheckLayer fails if fn's layer is gone; CheckBootEnv checks that a
	// booted guest's agent set fn's environment.
	AttachDeps   func(spec *vmm.Spec, fn *catalog.Function)
	CheckLayer   func(fn *catalog.Function) error
	CheckBootEnv func(ctx context.Context, fn *catalog.Function, guest *agent.Conn) error
	// Admit waits until a VM of fn may start (admission); release gives
	// the room back.
	Admit func(ctx context.Context, fn *catalog.Function) (release func(), err error)
	// Refuse is why no VM of function may start now (the daemon closing,
	// the function being deleted), nil if one may.
	Refuse func(function string) error
	// MarkIdle marks the VMs the pools hold as such (idle in the
	// keep-alive pool; a ready clone's counted memory); ForgetPooled drops
	// VM id from the pools before it is deleted.
	MarkIdle     func(vms ...*catalog.VM)
	ForgetPooled func(id string)
	Spans        Spans
}

// Spans traces the VMs' steps (the daemon's tracer, span names and
// attributes); each returns what ends the span.
type Spans interface {
	Boot(ctx context.Context, function string) (context.Context, func(vm string, err error))
	VMMStart(ctx context.Context, vm, function string) (context.Context, func(error))
	Teardown(ctx context.Context, vm, function, state, reason string) func()
}

// Manager owns the VMs with a VMM process.
type Manager struct {
	cfg Config
	d   Deps

	mu      sync.Mutex
	live    map[string]*Live // VMs with a process
	confine confinement      // per-VM users and cgroups (guarded by mu: uidsInUse)
	net     *vmnet.Host      // builds each VM's network (OpenHost)
	wg      sync.WaitGroup   // supervisors
}

// New makes the VM manager; OpenHost prepares the host before VMs start.
func New(cfg Config, d Deps) *Manager {
	return &Manager{cfg: cfg, d: d, live: map[string]*Live{}, confine: confinement{uidsInUse: map[uint32]string{}}}
}

// StopAll stops every VM with a VMM (state, reason); starts are to be
// refused first (Deps.Refuse).
func (m *Manager) StopAll(ctx context.Context, state, reason string) {
	m.mu.Lock()
	live := make([]*Live, 0, len(m.live))
	for _, lv := range m.live {
		live = append(live, lv)
	}
	m.mu.Unlock()
	for _, lv := range live {
		m.Stop(ctx, lv, state, reason)
	}
}

// Wait waits until the supervisors of the VMs started so far have ended.
func (m *Manager) Wait() { m.wg.Wait() }

// CheckPolicy checks a network policy against the host (full egress
// allowed); before OpenHost every policy passes.
func (m *Manager) CheckPolicy(p vmnet.Policy) error {
	if m.net == nil {
		return nil
	}
	return m.net.CheckPolicy(p)
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
