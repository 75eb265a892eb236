package vms

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// Live is a VM with a VMM process. Mu serializes what is done to it
// (invocations, snapshots, pause, deletion). Its state in memory is the
// Manager's (State, Mark, SetState).
type Live struct {
	Mu      sync.Mutex
	ID      string
	Fn      *catalog.Function
	Version int // the function version it runs (0: unversioned, -1: a deploy's, unpublished)
	M       vmm.Machine
	Agent   *agent.Conn
	RunDir  string
	MemPath string // guest RAM file for booted VMs (shared); "" for restored ones
	Shared  bool   // guest RAM is in MemPath, so the VM can be snapshotted
	state   string // guarded by Manager.mu

	Sess             restore.Session        // restored VMs: the strategy serving their memory
	Untimed          time.Duration          // the strategy's time before the restore proper, reported apart (cached's fill)
	CountersAtResume procstat.Counters      // VMM counters just before the vCPUs resumed
	TraceAtResume    faulttrace.Counters    // the VMM's tracepoint counters then (faulttrace)
	DaemonTraceStart faulttrace.Counters    // the daemon's when the restore or warm request began
	Spec             vmm.Spec               // what the VMM was started with
	StrategyFailed   atomic.Pointer[string] // why the strategy could no longer serve the VM's memory
	SecretDigests    map[string]string      // the secrets its restore delivered: name -> digest
	unconfine        func()                 // frees the VM's user id and cgroup once the VMM is gone
	net              *vmnet.Net             // the VM's network namespace and service proxies
	release          func()                 // gives the VM's admitted room back once the VMM is gone

	Deleting atomic.Bool             // a delete waits for the VM: nothing new starts on it (delete.go)
	KilledBy atomic.Pointer[string]  // why a delete killed the VMM while the VM was in use
	Running  atomic.Pointer[Running] // the invocation under way, if any
}

// Running is the invocation a VM is serving.
type Running struct {
	ID      string
	Started time.Time
	Timeout time.Duration
}

// Exited says whether lv's VMM process has ended.
func (lv *Live) Exited() bool {
	select {
	case <-lv.M.Done():
		return true
	default:
		return false
	}
}

// Live returns the VM id if it has a VMM.
func (m *Manager) Live(id string) (*Live, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	lv, ok := m.live[id]
	return lv, ok
}

// Of are function's VMs with a VMM.
func (m *Manager) Of(function string) []*Live {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Live
	for _, lv := range m.live {
		if lv.Fn.Name == function {
			out = append(out, lv)
		}
	}
	return out
}

// Count is how many VMs have a VMM, and how many user ids they hold.
func (m *Manager) Count() (live, uids int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live), len(m.confine.uidsInUse)
}

// State is lv's state in memory (the catalog may learn it later).
func (m *Manager) State(lv *Live) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return lv.state
}

// Mark sets lv's state in memory only: the catalog learns it later.
func (m *Manager) Mark(lv *Live, state string) {
	m.mu.Lock()
	lv.state = state
	m.mu.Unlock()
}

// SetState sets lv's state in memory and in the catalog, with reason; a
// VM that failed or stopped has no process any more.
func (m *Manager) SetState(ctx context.Context, lv *Live, state, reason string) {
	m.Mark(lv, state)
	v, err := m.d.Catalog.GetVM(ctx, lv.ID)
	if err != nil {
		return
	}
	v.State, v.Reason = state, reason
	if state == catalog.StateFailed || state == catalog.StateStopped {
		v.PID = 0
	}
	if err := m.d.Catalog.PutVM(ctx, v); err != nil {
		m.d.Log.Error("record vm state", "vm", lv.ID, "state", state, "err", err)
	}
}

// Where is a live VM for which match holds, or nil; standby VMs of the
// VMM pool do not count (they go when their snapshot or function does).
func (m *Manager) Where(ctx context.Context, match func(*catalog.VM) bool) (*catalog.VM, error) {
	vms, err := m.d.Catalog.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	for _, v := range vms {
		if v.Live() && v.State != catalog.StateStandby && match(v) {
			return v, nil
		}
	}
	return nil, nil
}
