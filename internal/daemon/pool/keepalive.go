package pool

import (
	"log/slog"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// The keep-alive pool: after a cold invocation the VM is kept, idle, for
// the function's keep-alive time, and the function's next invocations that
// name no snapshot or strategy run on it warm ("pooled"), as Lambda reuses
// execution environments. A function keeps at most MaxIdle idle VMs; a VM
// idle for its keep-alive time is stopped, and so is the oldest idle VM
// when a start does not fit the host's budget (admission reclaims it) or
// the host's available memory runs low (Pressure). A function with
// keep_alive_s -1 opts out: every invocation starts from a fresh snapshot.

// Kept is an idle VM of the keep-alive pool; V is the daemon's VM handle.
type Kept[V any] struct {
	VM       V
	Rec      *catalog.VM // its record; Rec.ID is the VM's id
	Fn       *catalog.Function
	Snapshot string // restored from
	since    time.Time
	timer    *time.Timer
}

// KeepAliveConfig sizes the keep-alive pool.
type KeepAliveConfig struct {
	// KeepAlive is a function's keep-alive time unless it sets its own.
	KeepAlive time.Duration
	// MaxIdle is how many idle VMs a function keeps at most (0: none).
	MaxIdle int
}

// KeepAliveDeps is what the keep-alive pool needs of the daemon.
type KeepAliveDeps[V any] struct {
	// Live says whether the VM of that id still has its process.
	Live func(id string) bool
	// Retire stops a VM that served cold or pooled invocations and forgets it.
	Retire func(vm V, rec *catalog.VM, why string)
	// Evicted counts an idle VM stopped, by metric label.
	Evicted func(label string)
	Log     *slog.Logger
}

// KeepAlive is the keep-alive pool of idle VMs.
type KeepAlive[V any] struct {
	cfg  KeepAliveConfig
	deps KeepAliveDeps[V]

	mu   sync.Mutex
	idle map[string][]*Kept[V] // by function, most recently used last
}

// NewKeepAlive makes an empty keep-alive pool.
func NewKeepAlive[V any](cfg KeepAliveConfig, deps KeepAliveDeps[V]) *KeepAlive[V] {
	return &KeepAlive[V]{cfg: cfg, deps: deps, idle: map[string][]*Kept[V]{}}
}

// TTL is how long fn's VMs are kept idle; 0: not at all.
func (p *KeepAlive[V]) TTL(fn *catalog.Function) time.Duration {
	switch {
	case fn.KeepAliveS < 0:
		return 0
	case fn.KeepAliveS > 0:
		return time.Duration(fn.KeepAliveS) * time.Second
	}
	return p.cfg.KeepAlive
}

// Keeps says whether fn's VMs may be kept at all.
func (p *KeepAlive[V]) Keeps(fn *catalog.Function) bool {
	return p.TTL(fn) > 0 && p.cfg.MaxIdle > 0
}

// Park keeps a VM that just answered (its lock held by the caller) for its
// function's next invocation; false if the pool does not take it (the
// function opted out or keeps its most idle VMs already).
func (p *KeepAlive[V]) Park(vm V, rec *catalog.VM, fn *catalog.Function, snapshot string) bool {
	ttl := p.TTL(fn)
	if ttl <= 0 || p.cfg.MaxIdle <= 0 {
		return false
	}
	k := &Kept[V]{VM: vm, Rec: rec, Fn: fn, Snapshot: snapshot, since: time.Now()}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle[fn.Name]) >= p.cfg.MaxIdle {
		return false
	}
	k.timer = time.AfterFunc(ttl, func() { p.Evict(k, WhyExpired) })
	p.idle[fn.Name] = append(p.idle[fn.Name], k)
	return true
}

// Take hands out the most recently used idle VM of function restored
// from snapshot, or nil; the caller owns it (and must lock it) from then.
func (p *KeepAlive[V]) Take(function, snapshot string) *Kept[V] {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[function]
	for i := len(list) - 1; i >= 0; i-- {
		k := list[i]
		if k.Snapshot != snapshot {
			continue
		}
		list = append(list[:i:i], list[i+1:]...) // a dead one taken on the way stays out too
		p.idle[function] = list
		k.timer.Stop()
		if p.deps.Live(k.Rec.ID) {
			return k
		}
	}
	return nil
}

// Unpark removes k from the pool; false if it was not there (taken or
// evicted already).
func (p *KeepAlive[V]) Unpark(k *Kept[V]) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[k.Fn.Name]
	for i, q := range list {
		if q == k {
			p.idle[k.Fn.Name] = append(list[:i:i], list[i+1:]...)
			k.timer.Stop()
			return true
		}
	}
	return false
}

// Why idle VMs are stopped, and the metric label of each.
const (
	WhyExpired  = "keep-alive time over"
	WhyRoom     = "room needed for another VM"
	WhyPressure = "host memory low"
)

// evictionLabel also names the daemon's reasons: a function or snapshot
// deleted, a secret changed.
var evictionLabel = map[string]string{WhyExpired: "expired", WhyRoom: "room", WhyPressure: "memory_pressure",
	"function deleted": "deleted", "snapshot deleted": "deleted", "secret changed": "secret_changed"}

// Evict stops an idle VM and forgets it.
func (p *KeepAlive[V]) Evict(k *Kept[V], why string) {
	if !p.Unpark(k) {
		return
	}
	label, ok := evictionLabel[why]
	if !ok {
		label = "other"
	}
	p.deps.Evicted(label)
	p.deps.Log.Info("idle vm stopped", "vm", k.Rec.ID, "function", k.Fn.Name, "reason", why)
	p.deps.Retire(k.VM, k.Rec, why)
}

// EachWhere calls do with every idle VM match selects (do runs without
// the pool's lock).
func (p *KeepAlive[V]) EachWhere(match func(*Kept[V]) bool, do func(*Kept[V])) {
	eachWhere(&p.mu, &p.idle, match, do)
}

// EvictWhere stops every idle VM match selects.
func (p *KeepAlive[V]) EvictWhere(match func(*Kept[V]) bool, why string) {
	p.EachWhere(match, func(k *Kept[V]) { p.Evict(k, why) })
}

// Forget takes VM id out of the pool without stopping it (it is being
// deleted).
func (p *KeepAlive[V]) Forget(id string) {
	p.EachWhere(func(k *Kept[V]) bool { return k.Rec.ID == id }, func(k *Kept[V]) { p.Unpark(k) })
}

// Reclaim stops the longest-idle VM to make room for a start; false if
// none is idle.
func (p *KeepAlive[V]) Reclaim() bool { return p.StopLongestIdle(WhyRoom) }

// StopLongestIdle stops the VM idle longest; false if none is idle.
func (p *KeepAlive[V]) StopLongestIdle(why string) bool {
	return withOldest(&p.mu, &p.idle, func(k *Kept[V]) time.Time { return k.since }, func(k *Kept[V]) { p.Evict(k, why) })
}

// Idle counts the pool's idle VMs.
func (p *KeepAlive[V]) Idle() int { return count(&p.mu, &p.idle) }

// MarkIdle sets IdleUntil on each of vms that the pool keeps: when its
// keep-alive time runs out.
func (p *KeepAlive[V]) MarkIdle(vms ...*catalog.VM) {
	until := map[string]time.Time{}
	p.mu.Lock()
	for _, list := range p.idle {
		for _, k := range list {
			until[k.Rec.ID] = k.since.Add(p.TTL(k.Fn))
		}
	}
	p.mu.Unlock()
	for _, v := range vms {
		if t, ok := until[v.ID]; ok && v.State == catalog.StateRunning {
			v.IdleUntil = t
		}
	}
}

// Close stops the pool's timers and empties it; the daemon stops the VMs.
func (p *KeepAlive[V]) Close() {
	stopAll(&p.mu, &p.idle, func(k *Kept[V]) *time.Timer { return k.timer })
}
