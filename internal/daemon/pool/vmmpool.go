package pool

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/restore"
)

// The VMM pool: VMM processes started ahead of restores, one set per
// snapshot and strategy. A standby VM has been planned (snapshot verified,
// the strategy's session begun) and its QEMU started with -incoming defer:
// guest memory is laid out by the interposer and, for REAP, the working set
// is installed; only the device state, the resume and the clone's renewal
// are left for the restore. A restore of that snapshot and strategy takes
// a standby VM when there is one and starts a new VMM otherwise; either
// way the pool is refilled in the background, up to the function's size,
// within the pool's memory budget and the host's admission budget. A
// standby VM unused for its time-to-live is stopped, and standby VMs are
// the first to give way when a start needs room.

// Key names what a standby VM or a ready clone was prepared for.
type Key struct {
	Snapshot string
	Kind     restore.Kind
}

// Standby is a VM of the VMM pool, waiting for a restore; V is the
// daemon's VM handle, P its planned restore.
type Standby[V, P any] struct {
	Key   Key
	VM    V
	Rec   *catalog.VM // its record; Rec.ID is the VM's id
	Plan  P
	mem   int // MiB counted against the pool's budget
	since time.Time
	timer *time.Timer
}

// VMMPoolConfig sizes the VMM pool.
type VMMPoolConfig struct {
	Size        int           // standby VMs per snapshot and strategy unless a function sets its own; < 0: none
	TTL         time.Duration // how long one waits unless its function sets its own
	MemoryMiB   int           // bounds the memory standby VMs hold together
	OverheadMiB int           // a VM's memory beyond its guest RAM
	BootTimeout time.Duration // longest wait for fills when a snapshot's VMs are dropped
}

// VMMPoolDeps is what the VMM pool needs of the daemon.
type VMMPoolDeps[V, P any] struct {
	// Start plans a restore of key, starts its VMM and runs the strategy
	// up to the point where the device state is due. The VM holds the room
	// release gives back; on an error Start has called release or stopped
	// the VM.
	Start func(ctx context.Context, key Key, release func()) (vm V, rec *catalog.VM, plan P, err error)
	// Enlist locks vm, calls join (which puts it in the pool), records it
	// standby and unlocks it: a restore that takes it at once finds it so.
	Enlist func(vm V, join func())
	// Retire stops a VM and forgets it.
	Retire func(vm V, rec *catalog.VM, why string)
	// Live says whether the VM of that id still has its process.
	Live func(id string) bool
	// Admit admits a start only if it fits now (admission's TryAcquire).
	Admit func(fn string, memMiB, fnMax int) (release func(), ok bool)
	// Go runs f in the background, waited for by the daemon's Close;
	// false if the daemon is closing (f does not run).
	Go func(f func()) bool
	// Closed says whether the daemon is closing.
	Closed func() bool
	// Dropped counts a standby VM stopped unused, by why.
	Dropped func(why string)
	Log     *slog.Logger
}

// VMMPool holds standby VMs.
type VMMPool[V, P any] struct {
	cfg  VMMPoolConfig
	deps VMMPoolDeps[V, P]

	mu      sync.Mutex
	ready   map[Key][]*Standby[V, P] // oldest first
	filling map[Key]int              // fills under way
	memMiB  int                      // of ready and filling VMs
	// epoch counts, per snapshot, the times its standby VMs were dropped
	// (evicted, stored, deleted): a fill begun before a drop is discarded.
	epoch map[string]uint64
	// held are snapshots being deleted: no fill starts for them.
	held map[string]bool
	// restoring counts restores under way; fills wait for them (up to
	// FillPatience), so a burst's guests do not share the CPUs with VMM
	// starts for the next one.
	restoring atomic.Int64
}

// FillPatience is how long a refill waits for restores under way to end.
var FillPatience = 2 * time.Second

// Why standby VMs are stopped.
const (
	WhyStandbyExpired = "standby time over"
	WhyStandbyRoom    = "room needed for another VM"
	WhyStandbyGone    = "its snapshot or function deleted"
	WhyStandbyEvict   = "snapshot evicted from the page cache"
	WhyStandbyStore   = "snapshot stored in or removed from the memory store"
)

// NewVMMPool makes an empty VMM pool.
func NewVMMPool[V, P any](cfg VMMPoolConfig, deps VMMPoolDeps[V, P]) *VMMPool[V, P] {
	return &VMMPool[V, P]{cfg: cfg, deps: deps, ready: map[Key][]*Standby[V, P]{}, filling: map[Key]int{},
		epoch: map[string]uint64{}, held: map[string]bool{}}
}

// Size is how many standby VMs fn keeps per snapshot and strategy.
func (p *VMMPool[V, P]) Size(fn *catalog.Function) int {
	switch {
	case fn.VMMPool < 0:
		return 0
	case fn.VMMPool > 0:
		return fn.VMMPool
	}
	return p.cfg.Size
}

// ttl is how long fn's standby VMs wait for a restore.
func (p *VMMPool[V, P]) ttl(fn *catalog.Function) time.Duration {
	if fn.VMMPoolTTLS > 0 {
		return time.Duration(fn.VMMPoolTTLS) * time.Second
	}
	return p.cfg.TTL
}

// BeginRestore counts a restore under way until the function it returns
// is called: fills wait for restores (up to FillPatience).
func (p *VMMPool[V, P]) BeginRestore() (end func()) {
	p.restoring.Add(1)
	return func() { p.restoring.Add(-1) }
}

// Restoring is how many restores are under way.
func (p *VMMPool[V, P]) Restoring() int64 { return p.restoring.Load() }

// Take hands out the oldest standby VM for key, or nil; the caller owns
// it from then (its room in admission included).
func (p *VMMPool[V, P]) Take(key Key) *Standby[V, P] {
	p.mu.Lock()
	defer p.mu.Unlock()
	for list := p.ready[key]; len(list) > 0; list = p.ready[key] {
		sb := list[0]
		p.ready[key] = list[1:]
		sb.timer.Stop()
		p.memMiB -= sb.mem
		if p.deps.Live(sb.Rec.ID) {
			return sb
		}
	}
	return nil
}

// Refill starts standby VMs for key in the background until the pool
// holds fn's size of them, as far as the budgets allow.
func (p *VMMPool[V, P]) Refill(key Key, fn *catalog.Function) {
	want := p.Size(fn)
	mem := fn.MemoryMiB + p.cfg.OverheadMiB
	for deadline := time.Now().Add(FillPatience); p.restoring.Load() > 0 && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	for {
		p.mu.Lock()
		have := len(p.ready[key]) + p.filling[key]
		if have >= want || p.memMiB+mem > p.cfg.MemoryMiB || p.held[key.Snapshot] {
			p.mu.Unlock()
			return
		}
		release, ok := p.deps.Admit(fn.Name, mem, fn.MaxConcurrency)
		if !ok {
			p.mu.Unlock()
			return
		}
		epoch, ttl := p.epoch[key.Snapshot], p.ttl(fn)
		// The fill waits for p.mu, so it counts as filling before it ends.
		if !p.deps.Go(func() { p.fill(key, mem, ttl, epoch, release) }) {
			p.mu.Unlock()
			release()
			return
		}
		p.filling[key]++
		p.memMiB += mem
		p.mu.Unlock()
	}
}

// fill starts one standby VM for key.
func (p *VMMPool[V, P]) fill(key Key, mem int, ttl time.Duration, epoch uint64, release func()) {
	t0 := time.Now()
	vm, rec, plan, err := p.deps.Start(context.Background(), key, release)
	if err == nil && p.deps.Closed() { // Close may have listed the live VMs before this one
		p.deps.Retire(vm, rec, "daemon stopped")
		err = errors.New("daemon stopped")
	}
	started := err == nil
	p.mu.Lock()
	if started && p.epoch[key.Snapshot] != epoch {
		// Its snapshot was evicted, stored or deleted while it started. It
		// still counts as filling until it is gone: whoever dropped the
		// snapshot's VMs waits for that.
		p.mu.Unlock()
		p.deps.Retire(vm, rec, "its snapshot changed while it started")
		p.mu.Lock()
		started = false
	}
	// The check above, joining the pool and leaving the fills happen under
	// one hold of the lock, so a drop either sees it filling or ready.
	doneFilling(p.filling, key)
	if !started {
		p.memMiB -= mem
		p.mu.Unlock()
		if err != nil {
			p.deps.Log.Warn("vmm pool: standby vm not started", "snapshot", key.Snapshot, "strategy", key.Kind, "err", err)
		}
		return
	}
	sb := &Standby[V, P]{Key: key, VM: vm, Rec: rec, Plan: plan, mem: mem, since: time.Now()}
	sb.timer = time.AfterFunc(ttl, func() { p.Drop(sb, WhyStandbyExpired) })
	p.deps.Enlist(vm, func() {
		p.ready[key] = append(p.ready[key], sb)
		p.mu.Unlock()
	})
	p.deps.Log.Debug("vmm pool: standby vm ready", "vm", rec.ID, "snapshot", key.Snapshot, "strategy", key.Kind,
		"start_ms", float64(time.Since(t0).Microseconds())/1000)
}

// Drop stops a standby VM and forgets it, if it is still in the pool.
func (p *VMMPool[V, P]) Drop(sb *Standby[V, P], why string) {
	if !p.unpool(func(q *Standby[V, P]) bool { return q == sb }) {
		return
	}
	p.deps.Dropped(why)
	p.deps.Log.Debug("vmm pool: standby vm stopped", "vm", sb.Rec.ID, "reason", why)
	p.deps.Retire(sb.VM, sb.Rec, why)
}

// unpool takes the standby VMs match selects out of the pool; false if
// there were none.
func (p *VMMPool[V, P]) unpool(match func(*Standby[V, P]) bool) bool {
	return removeWhere(&p.mu, &p.ready, match, func(sb *Standby[V, P]) {
		p.memMiB -= sb.mem
		sb.timer.Stop()
	})
}

// Forget takes VM id out of the pool, if it is there, before it is
// deleted: its room and its timer go with it.
func (p *VMMPool[V, P]) Forget(id string) {
	p.unpool(func(sb *Standby[V, P]) bool { return sb.Rec.ID == id })
}

// Hold stops (or allows again) fills for snapshot id.
func (p *VMMPool[V, P]) Hold(id string, hold bool) { setHeld(&p.mu, p.held, id, hold) }

// DropSnapshot stops the standby VMs of snapshot id that match (nil: all
// of them). Those still starting are discarded when ready, and it waits
// for them (up to the boot timeout): the caller is about to delete, evict
// or replace what they map.
func (p *VMMPool[V, P]) DropSnapshot(id string, match func(*Standby[V, P]) bool, why string) {
	p.mu.Lock()
	p.epoch[id]++
	p.mu.Unlock()
	p.DropWhere(func(sb *Standby[V, P]) bool { return sb.Key.Snapshot == id && (match == nil || match(sb)) }, why)
	waitFills(&p.mu, p.filling, id, p.cfg.BootTimeout)
}

// DropWhere stops every standby VM match selects.
func (p *VMMPool[V, P]) DropWhere(match func(*Standby[V, P]) bool, why string) {
	eachWhere(&p.mu, &p.ready, match, func(sb *Standby[V, P]) { p.Drop(sb, why) })
}

// Reclaim stops the oldest standby VM to make room for a start; false if
// there is none.
func (p *VMMPool[V, P]) Reclaim() bool {
	return withOldest(&p.mu, &p.ready, func(sb *Standby[V, P]) time.Time { return sb.since },
		func(sb *Standby[V, P]) { p.Drop(sb, WhyStandbyRoom) })
}

// Count is how many standby VMs the pool holds.
func (p *VMMPool[V, P]) Count() int { return count(&p.mu, &p.ready) }

// Usage is what the pool holds for key, what is filling for it, and the
// memory of all ready and filling VMs.
func (p *VMMPool[V, P]) Usage(key Key) (ready, filling, memMiB int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready[key]), p.filling[key], p.memMiB
}

// Close stops the pool's timers and empties it; the daemon stops the VMs.
func (p *VMMPool[V, P]) Close() {
	stopAll(&p.mu, &p.ready, func(sb *Standby[V, P]) *time.Timer { return sb.timer })
}
