package restorer

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/faulttrace"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Plan is a restore planned but not started: the snapshot verified, the
// strategy's session begun, the VMM's spec made.
type Plan struct {
	sn    *catalog.Snapshot
	fn    *catalog.Function
	spec  vmm.Spec
	sess  restore.Session
	start time.Time // when set-up began (after a cached fill)
	t     *Timing
	// daemonTrace: the daemon's tracepoint counters when the restore began.
	daemonTrace faulttrace.Counters
	noSecrets   bool // Opts.NoSecrets
	noHook      bool // Opts.NoHook
}

// Session is the strategy session the plan began.
func (c *Plan) Session() restore.Session { return c.sess }

// record is the catalog record of the plan's VM.
func (c *Plan) record() *catalog.VM {
	return &catalog.VM{ID: c.spec.ID, Function: c.fn.Name, Snapshot: c.sn.ID, Strategy: string(c.sess.Kind()), Version: c.sn.Version}
}

// attrs describe the plan's VM vm for its spans.
func (c *Plan) attrs(vm, vmmFrom string) Attrs {
	return Attrs{VM: vm, Function: c.fn.Name, Snapshot: c.sn.ID, Strategy: string(c.sess.Kind()), VMM: vmmFrom}
}

// plan verifies the snapshot and begins the strategy's session.
func (r *Restorer[V]) plan(ctx context.Context, row Row, o Opts) (*Plan, error) {
	c := &Plan{start: o.Start, daemonTrace: r.d.Trace(os.Getpid())}
	o.Begin = r.d.Pin(o.Begin) // its artifacts stay as they are until its VMM has them
	v, m, err := r.d.Verify(ctx, row)
	if err != nil {
		return nil, err
	}
	c.sn, c.fn = v.Sn, v.Fn
	c.t = &Timing{VerifyMS: ms(time.Since(c.start))}
	id := newID()
	c.spec = r.d.VMs.BaseSpec(id, c.fn)
	c.spec.Cmdline, c.spec.Incoming = m.Guest.Cmdline, true
	if err := os.MkdirAll(c.spec.RunDir, 0o700); err != nil {
		return nil, err
	}
	env := restore.Env{RunDir: c.spec.RunDir, Log: r.d.Log, Loaders: r.d.Loaders, Store: r.d.Store(), VMID: id,
		HugePages: r.cfg.HugePages}
	sctx, end := r.d.Spans.Strategy(ctx, id, c.fn.Name, c.sn.ID)
	snap := restore.Snapshot{Dir: c.sn.Dir, Manifest: m}
	var pulled time.Duration
	switch {
	case c.sn.RemoteMemory:
		c.t.Source = "registry"
		c.sess, c.sn, pulled, err = r.d.Registry.BeginLazy(sctx, c.sn, o.Begin, snap, env)
		c.t.PullMS = ms(pulled)
	default:
		c.t.Source = "local"
		if r.cfg.MemorySource != nil {
			snap.Source, snap.MemFile, err = r.cfg.MemorySource(sctx, c.sn.ID)
		}
		if err == nil {
			c.sess, err = o.Begin(sctx, snap, env)
		}
	}
	strategy := ""
	if err == nil {
		// Time the strategy reports apart (cached's fill) is not set-up.
		c.start = c.start.Add(c.sess.Untimed())
		c.spec.Memory = c.sess.Memory()
		strategy = string(c.sess.Kind())
	}
	end(strategy, err)
	if err != nil {
		_ = os.RemoveAll(c.spec.RunDir)
		// %w twice: callers can tell a strategy that needs the memory file
		// here (restore.ErrNeedsLocalMemory) from other failures.
		return nil, fmt.Errorf("%w: vm %s: %w", errdefs.ErrVMFailed, id, err)
	}
	return c, nil
}

// StartStandby plans a restore of snapshot with strategy kind, starts its
// VMM and runs the strategy up to the point where the device state is due
// (a standby VM of the VMM pool). The VM holds the room release gives
// back; on an error release has been called or the VM stopped.
func (r *Restorer[V]) StartStandby(ctx context.Context, snapshot string, kind restore.Kind, release func()) (V, *catalog.VM, *Plan, error) {
	var none V
	st, err := r.Strategy(string(kind))
	if err != nil {
		release()
		return none, nil, nil, err
	}
	row, err := r.d.Row(ctx, snapshot)
	if err != nil {
		release()
		return none, nil, nil, err
	}
	c, err := r.plan(ctx, row, Opts{Begin: st.Start, Start: time.Now()})
	if err != nil {
		release()
		return none, nil, nil, err
	}
	rec := c.record()
	started := time.Now()
	vm, err := r.d.VMs.Start(ctx, rec, c.spec, c.fn, release)
	if err != nil {
		c.sess.Close()
		return none, nil, nil, err
	}
	vm.Lock()
	defer vm.Unlock()
	vm.Attach(c.sess, 0)
	if err := r.startClone(ctx, vm, c, started); err != nil {
		r.d.VMs.Stop(context.WithoutCancel(ctx), vm, catalog.StateFailed, fmt.Sprintf("standby for %s: %v", snapshot, err))
		return none, nil, nil, err
	}
	return vm, rec, c, nil
}

// startClone runs the strategy's part once the VMM of a locked VM has
// started (REAP's working set installed, say), up to where the device
// state is due.
func (r *Restorer[V]) startClone(ctx context.Context, vm V, c *Plan, started time.Time) error {
	if err := c.sess.Started(ctx, vm.Machine().PID()); err != nil {
		return fmt.Errorf("%s strategy: %w", c.sess.Kind(), err)
	}
	if failed := c.sess.Failed(); failed != nil {
		go r.watchStrategy(vm, failed)
	}
	c.t.VMMStartMS = ms(time.Since(started))
	return nil
}

// watchStrategy kills a VM whose strategy can no longer serve its memory
// (the kernel would otherwise hand the guest zero pages).
func (r *Restorer[V]) watchStrategy(vm V, failed <-chan error) {
	select {
	case err := <-failed:
		vm.FailStrategy(err.Error())
		r.d.Log.Error("restore strategy failed; killing vm", "vm", vm.VMID(), "err", err)
		r.d.VMs.Stop(context.Background(), vm, catalog.StateFailed, err.Error())
	case <-vm.Machine().Done():
	}
}
