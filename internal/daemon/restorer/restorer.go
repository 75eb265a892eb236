// Package restorer is the daemon's restore of a clone: a VM started from a
// snapshot with a restore strategy, from the request to a guest ready for
// its first invocation (docs/design.md, "Restore"). It verifies the
// snapshot, plans the restore (the strategy's session), starts the VMM or
// takes a standby VM of the VMM pool, loads the device state, resumes the
// vCPUs and renews the clone (clock, entropy, secrets, on_restore hook).
// A strict restore refuses a strategy's fallback.
package restorer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

// Timing breaks a restore down, in milliseconds.
type Timing = wire.RestoreTiming

// Config is what restores are run with (the daemon's configuration).
type Config struct {
	BootTimeout time.Duration // resume to the guest's agent renewed
	// HugePages keeps QEMU's MADV_HUGEPAGE hint on every restore's memory.
	HugePages bool
	// MemorySource, if set, says for each restore of a local snapshot
	// where its memory comes from.
	MemorySource func(ctx context.Context, snapID string) (src restore.MemorySource, placeholder string, err error)
}

// VM is a VM with a VMM process as the restorer sees it (*vms.Live).
type VM interface {
	Lock()
	Unlock()
	VMID() string
	Function() *catalog.Function
	Machine() vmm.Machine
	// Session is the strategy session serving the VM's memory; Attach
	// gives it one, with its time before the restore proper.
	Session() restore.Session
	Attach(sess restore.Session, untimed time.Duration)
	// Resuming records the VMM's counters just before its vCPUs resume
	// and the daemon's tracepoint counters when the restore began.
	Resuming(counters procstat.Counters, trace, daemonTrace faulttrace.Counters)
	// FailStrategy records why the strategy can no longer serve the VM's
	// memory; StrategyFailure reads it (nil: it still can).
	FailStrategy(why string)
	StrategyFailure() *string
	SetSecretDigests(digests map[string]string)
	Renew(ctx context.Context, rn agent.Renewal) (*agent.Reply, error)
}

// VMs starts and stops VMs with a VMM process (*vms.Manager).
type VMs[V VM] interface {
	BaseSpec(id string, fn *catalog.Function) vmm.Spec
	Start(ctx context.Context, rec *catalog.VM, spec vmm.Spec, fn *catalog.Function, release func()) (V, error)
	Stop(ctx context.Context, vm V, state, reason string)
	Mark(vm V, state string)
	WithAgent(ctx context.Context, vm V, timeout time.Duration, fn func(context.Context) error) error
}

// Pool is the VMM pool of standby VMs, one set per snapshot and strategy.
type Pool[V VM] interface {
	// BeginRestore counts a restore under way until end is called.
	BeginRestore() (end func())
	// Size is how many standby VMs fn keeps per snapshot and strategy.
	Size(fn *catalog.Function) int
	// Take takes a standby VM of snapshot and kind, if there is one.
	Take(snapshot string, kind restore.Kind) (vm V, rec *catalog.VM, plan *Plan, ok bool)
	// Refill refills the pool for snapshot and kind.
	Refill(snapshot string, kind restore.Kind, fn *catalog.Function)
	// Retire stops a VM and forgets it.
	Retire(ctx context.Context, vm V, rec *catalog.VM, why string)
}

// Registry is the registry's side of lazy snapshots.
type Registry interface {
	// BeginLazy begins a restore of lazy snapshot sn (regsync.Sync.BeginLazy).
	BeginLazy(ctx context.Context, sn *catalog.Snapshot, begin restore.BeginFunc, snap restore.Snapshot,
		env restore.Env) (sess restore.Session, from *catalog.Snapshot, pulled time.Duration, err error)
	// Lazy says whether sess serves memory from the registry.
	Lazy(sess restore.Session) bool
	// Failure is the registry's error behind a failed restore of VM vm
	// with sess, nil if the registry did not fail.
	Failure(sess restore.Session, vm string) error
}

// Catalog records VMs (*catalog.DB).
type Catalog interface {
	PutVM(ctx context.Context, vm *catalog.VM) error
}

// Step is a traced step of a restore.
type Step int

// The traced steps of a VM's restore.
const (
	StepVMMStart  Step = iota // VMM process start to its monitor ready (and the strategy attached)
	StepStateLoad             // device state loaded
	StepResume                // vCPUs resumed to the guest renewed and answering
)

// Attrs describe the VM a step restores.
type Attrs struct {
	VM, Function, Snapshot, Strategy string
	VMM                              string // "pooled": a standby VM's (StepVMMStart); "" otherwise
}

// Spans traces a restore's steps (the daemon's tracer); each returns what
// ends its span.
type Spans interface {
	// Strategy traces the strategy's session begun; end names the
	// strategy that runs ("" when none began).
	Strategy(ctx context.Context, vm, function, snapshot string) (context.Context, func(strategy string, err error))
	Step(ctx context.Context, step Step, a Attrs) (context.Context, func(error))
}

// Row is a snapshot's catalog row and its function's.
type Row struct {
	Sn *catalog.Snapshot
	Fn *catalog.Function
}

// Deps is what the restorer needs of the rest of the daemon.
type Deps[V VM] struct {
	Log     *slog.Logger
	Catalog Catalog
	VMs     VMs[V]
	Pool    Pool[V]
	// Strategies are the restore strategies offered.
	Strategies func() []restore.Strategy
	// Admit waits until a VM of fn may start; release gives the room back.
	Admit func(ctx context.Context, fn *catalog.Function) (release func(), err error)
	// Row looks a snapshot and its function up.
	Row func(ctx context.Context, snapID string) (Row, error)
	// Verify checks a snapshot before anything is restored from it.
	Verify func(ctx context.Context, row Row) (Row, *snapshot.Manifest, error)
	// Pin keeps a snapshot's artifacts as they are until its VMM has them.
	Pin      func(begin restore.BeginFunc) restore.BeginFunc
	Registry Registry
	Loaders  *restore.Loaders // FaaSnap loaders, shared by all restores
	// Store is the memory store (premap), nil if none.
	Store func() *store.Store
	// SecretEnv is fn's secrets for its guest and their digests.
	SecretEnv func(fn *catalog.Function) ([]agent.EnvVar, map[string]string, error)
	// Trace reads a process's tracepoint counters (zero when off).
	Trace func(pid int) faulttrace.Counters
	// PoolHit counts a restore that took a standby VM (hit) or found none.
	PoolHit func(kind string, hit bool)
	Spans   Spans
}

// Restorer restores clones from snapshots.
type Restorer[V VM] struct {
	cfg Config
	d   Deps[V]
}

// New makes the restorer.
func New[V VM](cfg Config, d Deps[V]) *Restorer[V] {
	return &Restorer[V]{cfg: cfg, d: d}
}

// Strategy finds an offered restore strategy by name ("": the default).
func (r *Restorer[V]) Strategy(name string) (restore.Strategy, error) {
	kind, err := restore.ParseKind(name)
	if err == nil {
		for _, st := range r.d.Strategies() {
			if st.Kind == kind {
				return st, nil
			}
		}
		err = fmt.Errorf("restore strategy %q is not offered by this daemon", kind)
	}
	return restore.Strategy{}, fmt.Errorf("%w: %v", errdefs.ErrInvalid, err)
}

// RestoreVM restores a VM from snapshot snapID with the named strategy
// and refills the VMM pool behind it. The VM comes back unlocked and keeps
// running until deleted.
func (r *Restorer[V]) RestoreVM(ctx context.Context, snapID, strategy string) (*catalog.VM, *Timing, error) {
	st, err := r.Strategy(strategy)
	if err != nil {
		return nil, nil, err
	}
	row, err := r.d.Row(ctx, snapID)
	if err != nil {
		return nil, nil, err
	}
	vm, rec, t, err := r.Restore(ctx, row, Opts{Begin: st.Start, Start: time.Now(), Pool: st.Kind})
	if err != nil {
		return nil, nil, err
	}
	r.RefillLater(snapID, st.Kind, vm.Function())
	vm.Unlock()
	return rec, t, nil
}

// RefillLater refills the VMM pool for snapshot and kind in the background.
func (r *Restorer[V]) RefillLater(snapshot string, kind restore.Kind, fn *catalog.Function) {
	if r.d.Pool.Size(fn) > 0 {
		go r.d.Pool.Refill(snapshot, kind, fn)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// newID is a new VM id.
func newID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "vm-" + hex.EncodeToString(b[:])
}
