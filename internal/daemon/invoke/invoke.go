// Package invoke is the daemon's invocation paths: a warm invocation on a
// running VM, and the cold path (a ready clone, else a VM kept from an
// earlier invocation, else a restore from a snapshot), with the checks of
// a request, the failures of a guest (a timeout, a VM that died) and what
// is recorded of each invocation.
package invoke

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon/vms"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// MaxEventBytes bounds an invocation's event (Lambda's synchronous limit).
const MaxEventBytes = 6 << 20

// MaxTimeout is the longest timeout an invocation may ask for.
const MaxTimeout = time.Hour

// InvokeRequest asks for one invocation.
type InvokeRequest struct {
	Event   json.RawMessage
	Timeout time.Duration // 0: the daemon's default
	// EvictCache evicts the snapshot's files (memory, device state and the
	// strategies' artifacts) from the page cache first: cold invocations only.
	EvictCache bool
	// Logs: the caller wants the invocation's logs in its answer (the API
	// leaves them out otherwise; the history keeps them either way).
	Logs bool
}

// Config is what the invocations are bounded by (the daemon's
// configuration, defaults filled).
type Config struct {
	InvokeTimeout  time.Duration // a request's timeout unless it sets one
	BootTimeout    time.Duration // bounds a ready clone's renewal
	RemoteStrategy string        // restores snapshots whose memory is in the registry
}

// VMs is the VM manager as the invocations use it (*vms.Manager).
type VMs interface {
	Lock(ctx context.Context, id string, states ...string) (*vms.Live, error)
	Stop(ctx context.Context, lv *vms.Live, state, reason string)
	SetState(ctx context.Context, lv *vms.Live, state, reason string)
	Mark(lv *vms.Live, state string)
	WithAgent(ctx context.Context, lv *vms.Live, timeout time.Duration, fn func(context.Context) error) error
}

// Catalog is the catalog as the invocations use it (*catalog.DB).
type Catalog interface {
	DeleteVM(ctx context.Context, id string) error
	ListVersions(ctx context.Context, function string) ([]*catalog.Version, error)
}

// Tracing makes the invocations' spans and annotates the request's.
type Tracing interface {
	// Invoke starts the span of inv's round trip to its guest; end ends it.
	Invoke(ctx context.Context, inv *wire.Invocation) (_ context.Context, end func(error))
	// Annotate describes inv on the request's span.
	Annotate(ctx context.Context, inv *wire.Invocation)
	// AnnotateCold names a cold request's snapshot and function ("" if
	// none) on the request's span.
	AnnotateCold(ctx context.Context, snapshot, function string)
}

// Deps is what the invocations need of the rest of the daemon.
type Deps struct {
	Log     *slog.Logger
	Catalog Catalog
	VMs     VMs
	Tracing Tracing
	Ready   Ready
	Restore Restorer
	Cold    Cold
	// Faults is the tracepoints' tracer, nil when fault tracing is off.
	Faults func() *faulttrace.Tracer
	// LazyFailure is the registry's error when a VM restored from a lazy
	// snapshot failed because the registry did, else nil.
	LazyFailure func(lv *vms.Live) error
	// Logs are a reply's logs as the invocation answers them.
	Logs func(ctx context.Context, r *agent.Reply) *wire.InvocationLogs
	// Record keeps a completed invocation in the history and the metrics;
	// RecordFailure records one its guest failed (or returns err as is).
	Record        func(ctx context.Context, inv *wire.Invocation)
	RecordFailure func(ctx context.Context, inv *wire.Invocation, start time.Time, err error) error
	// Park keeps a VM that answered for its function's next invocation
	// (false if the keep-alive pool does not take it); Retire stops and
	// forgets a VM that served; TakeKept takes an idle VM of function
	// restored from snapshot, nil if none (counted in the metrics).
	Park     func(lv *vms.Live, rec *catalog.VM, snapshot string) bool
	Retire   func(ctx context.Context, lv *vms.Live, rec *catalog.VM, why string)
	TakeKept func(function, snapshot string) *Kept
	// Hold keeps the daemon's Close waiting until release is called (work
	// in the background); ok false, nothing held, if the daemon is closing.
	Hold func() (release func(), ok bool)
}

// Kept is an idle VM of the keep-alive pool, taken for an invocation.
type Kept struct {
	VM       *vms.Live
	Rec      *catalog.VM
	Snapshot string // restored from
}

// Invoker serves invocations.
type Invoker struct {
	cfg Config
	d   Deps
	log *slog.Logger
}

// New makes the invocation component.
func New(cfg Config, d Deps) *Invoker { return &Invoker{cfg: cfg, d: d, log: d.Log} }

// Timeout is a request's timeout: d, or the daemon's default if 0.
func (v *Invoker) Timeout(d time.Duration) (time.Duration, error) {
	if d == 0 {
		return v.cfg.InvokeTimeout, nil
	}
	if d < 0 || d > MaxTimeout {
		return 0, fmt.Errorf("%w: timeout must be between 1 ms and 1 h", errdefs.ErrInvalid)
	}
	return d, nil
}

// CheckEvent refuses an event over MaxEventBytes or not JSON.
func CheckEvent(ev json.RawMessage) error {
	if len(ev) > MaxEventBytes {
		return fmt.Errorf("%w: event is %d bytes, the limit is %d", errdefs.ErrInvalid, len(ev), MaxEventBytes)
	}
	if len(ev) > 0 && !json.Valid(ev) {
		return fmt.Errorf("%w: event is not valid JSON", errdefs.ErrInvalid)
	}
	return nil
}

// InvokeVM invokes the function on a running VM (a warm invocation).
func (v *Invoker) InvokeVM(ctx context.Context, vmID string, req InvokeRequest) (*wire.Invocation, error) {
	if err := CheckEvent(req.Event); err != nil {
		return nil, err
	}
	timeout, err := v.Timeout(req.Timeout)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	lv, err := v.d.VMs.Lock(ctx, vmID, catalog.StateRunning)
	if err != nil {
		return nil, err
	}
	defer lv.Mu.Unlock()
	if req.EvictCache {
		return nil, fmt.Errorf("%w: evict_cache applies to cold invocations only", errdefs.ErrInvalid)
	}
	inv := &wire.Invocation{ID: NewID(), Function: lv.Fn.Name, VM: vmID, Mode: "warm", Version: max(lv.Version, 0)}
	v.d.Tracing.Annotate(ctx, inv)
	v.markResume(lv)
	if err := v.Locked(ctx, lv, inv, req.Event, timeout); err != nil {
		return nil, v.d.RecordFailure(ctx, inv, start, err)
	}
	inv.Timing.TotalMS = ms(time.Since(start))
	v.d.Record(ctx, inv)
	return inv, nil
}

// markResume notes lv's counters as its invocation starts (a warm one, or
// a ready clone's), what the invocation's are measured from.
func (v *Invoker) markResume(lv *vms.Live) {
	lv.CountersAtResume, _ = procstat.Read(lv.M.PID())
	lv.TraceAtResume, lv.DaemonTraceStart = v.TraceOf(lv.M.PID()), v.TraceOf(os.Getpid())
}

// Locked sends the event to the agent of a locked VM. A guest that does
// not answer in time, or whose VMM dies, is killed and marked failed.
func (v *Invoker) Locked(ctx context.Context, lv *vms.Live, inv *wire.Invocation, event json.RawMessage, timeout time.Duration) error {
	return v.invokeWith(ctx, lv, inv, timeout, func(ctx context.Context) (*agent.Reply, error) {
		return lv.Agent.Invoke(ctx, lv.Fn.Name, event)
	})
}

// invokeWith is Locked with the agent's part given: call returns the
// invocation's answer (a ready clone's, whose event went with its
// renewal).
func (v *Invoker) invokeWith(ctx context.Context, lv *vms.Live, inv *wire.Invocation, timeout time.Duration,
	call func(context.Context) (*agent.Reply, error)) (err error) {
	sctx, end := v.d.Tracing.Invoke(ctx, inv)
	defer func() { end(err) }()
	ictx, cancel := context.WithTimeout(sctx, timeout)
	defer cancel()
	t0 := time.Now()
	lv.Running.Store(&vms.Running{ID: inv.ID, Started: t0, Timeout: timeout})
	reply, err := call(ictx)
	lv.Running.Store(nil)
	inv.Timing.InvokeMS = ms(time.Since(t0))
	if err != nil {
		return v.guestFailed(ctx, lv, inv, timeout, err)
	}
	if after, err := procstat.Read(lv.M.PID()); err == nil {
		d := procstat.Since(after, lv.CountersAtResume)
		inv.Process = &d
	}
	if v.d.Faults() != nil {
		inv.Trace = v.faultTrace(lv)
	}
	if lv.Sess != nil {
		lv.Sess.InvocationDone()
	}
	inv.OK = reply.OK
	inv.Result = reply.Result
	inv.Error = reply.Error
	inv.Logs = v.d.Logs(sctx, reply)
	inv.Timing.GuestMS = reply.DurationMS
	if !reply.OK && reply.Error == nil {
		inv.Error = &agent.Error{Type: "AgentError", Message: "guest reported failure without details"}
	}
	return nil
}

// NewID is a new invocation id.
func NewID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "inv-" + hex.EncodeToString(b[:])
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Ref reads a cold request's function reference (package versions' form,
// its name checked); the daemon's ParseRef.
type Ref func(s string) (versions.Ref, error)

// Cold is what the cold path needs besides the VMs and the pools: the
// function's versions and snapshots, the registry, the adaptive restore.
type Cold struct {
	ParseRef Ref
	// Gate keeps a function's cold starts and the replacement of its
	// snapshots apart (read-locked while one runs).
	Gate func(function string) *sync.RWMutex
	// Resolve is the version an invocation of ref runs; NewestSnapshotOf
	// that version's newest snapshot; StaleNote why the version is stale
	// ("" if it is not).
	Resolve          func(ctx context.Context, ref versions.Ref) (Target, error)
	NewestSnapshotOf func(ctx context.Context, function string, version int) (string, error)
	StaleNote        func(function string, version int) string
	// InvokeBooted serves a cold request of a stale version whose snapshot
	// no longer restores on a VM booted for it.
	InvokeBooted func(ctx context.Context, function string, target Target, event json.RawMessage, timeout time.Duration,
		start time.Time, why string) (*wire.Invocation, error)
	// Import imports a version's snapshot from the registry when the node
	// has none (notHere says why), for strategy kind.
	Import      func(ctx context.Context, function string, version int, kind restore.Kind, notHere error) (string, error)
	GetSnapshot func(ctx context.Context, id string) (*catalog.Snapshot, error)
	// Evict drops a snapshot's files from the page cache (and its standby
	// VMs).
	Evict    func(ctx context.Context, sn *catalog.Snapshot) error
	Adaptive Adaptive
}

// Target is what an invocation of a reference resolved to.
type Target struct {
	Version int    // 0: the function's unversioned snapshots
	Alias   string // the alias followed, if any
}

// Adaptive is the adaptive restore as a cold start uses it.
type Adaptive interface {
	// Settle picks a cold start's strategy up to the policy's decision:
	// decide is nil when it is fixed (choice says why), else the policy's
	// to call if the request restores.
	Settle(ctx context.Context, req ColdRequest, snapID string, st restore.Strategy) (_ restore.Strategy, choice *wire.StrategyChoice, decide Decide)
	// MeasureSet measures the working set a cold start's strategy used.
	MeasureSet(sess restore.Session, pid int, vm string, inv *wire.Invocation)
	// Observe adds a cold start to its version's evidence.
	Observe(ctx context.Context, inv *wire.Invocation, event json.RawMessage, variant bool)
}

// Decide is the adaptive policy's choice of a strategy for a cold start.
type Decide func(ctx context.Context, st restore.Strategy) (restore.Strategy, *wire.StrategyChoice)
