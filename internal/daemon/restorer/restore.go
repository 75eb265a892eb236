package restorer

import (
	"context"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
)

// Opts says how to restore.
type Opts struct {
	Begin restore.BeginFunc // the strategy's session (a Strategy's Start, or a prepare step's)
	Start time.Time         // when the request arrived
	// Pool, if set, is the strategy Begin starts: a standby VM of the VMM
	// pool for the snapshot and it may serve the restore.
	Pool restore.Kind
	// NoSecrets: the guest gets no secrets (a prepare's record VM, which
	// is snapshotted afterwards).
	NoSecrets bool
	// NoHook: the renewal skips the function's on_restore hook (a ready
	// clone's fill: its dispatch renews it again and runs the hook then).
	NoHook bool
	// Strict: the strategy may not fall back to vanilla (Strict).
	Strict bool
	// Admitted, if set, is room admission granted already (a ready
	// clone's fill): the restore does not wait for room.
	Admitted func()
}

// Restore restores a clone from a snapshot whose row was read and returns
// its VM locked, its strategy session attached to it: verify, plan (the
// strategy's session), start the VMM (or take a standby VM), load the
// device state, resume, renew the clone.
func (r *Restorer[V]) Restore(ctx context.Context, row Row, o Opts) (V, *catalog.VM, *Timing, error) {
	defer r.d.Pool.BeginRestore()()
	if o.Pool != "" && r.d.Pool.Size(row.Fn) > 0 {
		if vm, rec, c, ok := r.takeStandby(row.Sn.ID, o.Pool, o.Strict); ok {
			if o.Admitted != nil {
				o.Admitted() // the standby VM holds room of its own
			}
			vm, rec, t, err := r.restoreStandby(ctx, vm, rec, c, row, o)
			r.d.PoolHit(string(o.Pool), true)
			return vm, rec, t, err
		}
		r.d.PoolHit(string(o.Pool), false)
	}
	return r.restoreCold(ctx, row, o)
}

// restoreCold is Restore on a VMM of its own.
func (r *Restorer[V]) restoreCold(ctx context.Context, row Row, o Opts) (V, *catalog.VM, *Timing, error) {
	var none V
	// Room first, so nothing is held while waiting for it; the wait is
	// not set-up (it is reported apart).
	waitStart := time.Now()
	release, err := o.Admitted, error(nil)
	if release == nil {
		release, err = r.d.Admit(ctx, row.Fn)
	}
	if err != nil {
		return none, nil, nil, err
	}
	waited := time.Since(waitStart)
	o.Start = o.Start.Add(waited)
	c, err := r.plan(ctx, row, o)
	if err != nil {
		release()
		return none, nil, nil, err
	}
	c.noSecrets, c.noHook = o.NoSecrets, o.NoHook
	c.t.AdmissionWaitMS, c.t.VMM = ms(waited), "started"
	rec := c.record()
	t1 := time.Now()
	vctx, end := r.d.Spans.Step(ctx, StepVMMStart, c.attrs(rec.ID, ""))
	vm, err := r.d.VMs.Start(vctx, rec, c.spec, c.fn, release)
	if err != nil {
		end(err)
		c.sess.Close()
		return none, nil, nil, err
	}
	vm.Lock()
	vm.Attach(c.sess, c.sess.Untimed())
	err = r.startClone(ctx, vm, c, t1)
	end(err) // the VMM's start ends once the strategy has attached to it
	if err == nil {
		err = r.resumeClone(ctx, vm, c)
	}
	if err != nil {
		return none, nil, nil, r.failRestore(ctx, vm, row.Sn.ID, err)
	}
	return r.running(ctx, vm, rec, c.t)
}

// restoreStandby finishes a restore on a standby VM of the VMM pool (its
// lock not held): its snapshot checked again, then device state, resume
// and renewal. The VM already holds its room, so it does not wait for
// admission.
func (r *Restorer[V]) restoreStandby(ctx context.Context, vm V, rec *catalog.VM, c *Plan, row Row, o Opts) (V, *catalog.VM, *Timing, error) {
	var none V
	vm.Lock()
	c.start, c.noHook = o.Start, o.NoHook
	_, end := r.d.Spans.Step(ctx, StepVMMStart, c.attrs(vm.VMID(), "pooled"))
	end(nil) // started ahead of the request: an instant here
	if _, _, err := r.d.Verify(ctx, row); err != nil {
		r.d.VMs.Stop(context.WithoutCancel(ctx), vm, catalog.StateFailed, "standby: "+err.Error())
		vm.Unlock()
		return none, nil, nil, err
	}
	c.t = &Timing{VerifyMS: ms(time.Since(c.start)), VMM: "pooled", Source: "local"}
	if r.d.Registry.Lazy(c.sess) {
		c.t.Source = "registry"
	}
	if cpu, err := procstat.CPUTime(vm.Machine().PID()); err == nil {
		c.t.StandbyCPUMS = cpu
	}
	// In memory only: the catalog learns "running" once it is.
	r.d.VMs.Mark(vm, catalog.StateBooting)
	vm.Attach(c.sess, 0) // what the strategy did before the restore proper was done ahead of the request
	if err := r.resumeClone(ctx, vm, c); err != nil {
		return none, nil, nil, r.failRestore(ctx, vm, c.sn.ID, err)
	}
	return r.running(ctx, vm, rec, c.t)
}

// failRestore stops a locked VM whose restore failed and unlocks it.
func (r *Restorer[V]) failRestore(ctx context.Context, vm V, snapID string, err error) error {
	reason := fmt.Sprintf("restore from %s: %v", snapID, err)
	if why := vm.StrategyFailure(); why != nil { // the cause: the step then failed with the VMM gone
		reason = fmt.Sprintf("restore from %s: %s strategy: %s (then: %v)", snapID, vm.Session().Kind(), *why, err)
	} else if exitsWithin(vm, 200*time.Millisecond) { // the step failed because QEMU went: say why it did
		reason += "; vm process exited: " + vm.Machine().Exit().Reason
	}
	r.d.VMs.Stop(context.WithoutCancel(ctx), vm, catalog.StateFailed, reason)
	vm.Unlock()
	if err := r.d.Registry.Failure(vm.Session(), vm.VMID()); err != nil { // the registry, not the VM, failed
		return err
	}
	return fmt.Errorf("%w: vm %s: %s", errdefs.ErrVMFailed, vm.VMID(), reason)
}

// running records a restored VM as running; it comes back locked.
func (r *Restorer[V]) running(ctx context.Context, vm V, rec *catalog.VM, t *Timing) (V, *catalog.VM, *Timing, error) {
	rec.State = catalog.StateRunning
	if err := r.d.Catalog.PutVM(ctx, rec); err != nil {
		r.d.VMs.Stop(context.WithoutCancel(ctx), vm, catalog.StateFailed, "catalog: "+err.Error())
		vm.Unlock()
		var none V
		return none, nil, nil, err
	}
	return vm, rec, t, nil
}

// exitsWithin says whether vm's VMM process ends within d.
func exitsWithin(vm VM, d time.Duration) bool {
	select {
	case <-vm.Machine().Done():
		return true
	case <-time.After(d):
		return false
	}
}
