package restorer

import (
	"context"
	"crypto/rand"
	"fmt"
	"path/filepath"
	"time"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// resumeClone takes a locked VM whose VMM and strategy have started
// through device state and resume to a renewed guest, filling the timing;
// its error says which step failed.
func (r *Restorer[V]) resumeClone(ctx context.Context, vm V, c *Plan) error {
	t := c.t
	attrs := c.attrs(vm.VMID(), "")
	t2 := time.Now()
	lctx, end := r.d.Spans.Step(ctx, StepStateLoad, attrs)
	err := vm.Machine().LoadState(lctx, filepath.Join(c.sn.Dir, snapshot.StateFile))
	end(err)
	if err != nil {
		return fmt.Errorf("load device state: %w", err)
	}
	t.LoadStateMS = ms(time.Since(t2))
	pid := vm.Machine().PID()
	counters, _ := procstat.Read(pid)
	vm.Resuming(counters, r.d.Trace(pid), c.daemonTrace)
	rctx, end := r.d.Spans.Step(ctx, StepResume, attrs)
	err = r.resumeGuest(rctx, vm, c)
	end(err)
	return err
}

// resumeGuest resumes a clone's vCPUs and renews the guest, filling the
// timing.
func (r *Restorer[V]) resumeGuest(ctx context.Context, vm V, c *Plan) error {
	t := c.t
	cont := time.Now()
	if err := vm.Machine().Resume(ctx); err != nil {
		return fmt.Errorf("resume: %w", err)
	}
	resumed := time.Now()
	t.ContMS = ms(resumed.Sub(cont))
	t.SetupMS = ms(resumed.Sub(c.start))
	r.d.VMs.Mark(vm, catalog.StateRunning)
	// The restore request is the first the resumed guest gets: its answer
	// also says the agent is up (no ping round trip before it).
	if err := r.d.VMs.WithAgent(ctx, vm, r.cfg.BootTimeout, func(ctx context.Context) error {
		a, err := r.renewClone(ctx, vm, !c.noSecrets, c.noHook)
		if err == nil {
			t.AgentRestoreMS, t.AgentSteps = a.DurationMS, a.Steps
			t.AgentWaitMS = ms(a.Read.Sub(a.Written))
		}
		return err
	}); err != nil {
		return fmt.Errorf("guest agent restore: %w", err)
	}
	t.ResumeMS = ms(time.Since(resumed))
	return nil
}

// renewClone makes a restored guest a clone of its own before anyone uses
// it: the host's time for its clock, fresh entropy for its kernel RNG
// (reseeded at once), Python's and OpenSSL's generators reseeded, the
// function's on_restore hook run. Every clone of a snapshot starts with
// the same memory, so without this they would share random numbers and a
// stale clock.
// withSecrets: the guest also gets its function's secrets (Deps.SecretEnv).
// noHook: the hook does not run (an agent before protocol 6 runs it).
// It returns the agent's answer (its DurationMS is the guest's own time).
func (r *Restorer[V]) renewClone(ctx context.Context, vm V, withSecrets, noHook bool) (*agent.Reply, error) {
	rn, err := r.Renewal(vm, withSecrets)
	if err != nil {
		return nil, err
	}
	rn.NoHook = noHook
	a, err := vm.Renew(ctx, rn)
	if err != nil {
		return nil, err
	}
	r.Renewed(vm, a)
	return a, nil
}

// Renewal is what a clone's renewal sends the guest: fresh entropy, and
// the function's secrets if withSecrets (their digests recorded on vm).
func (r *Restorer[V]) Renewal(vm V, withSecrets bool) (agent.Renewal, error) {
	rn := agent.Renewal{Entropy: make([]byte, 64)}
	if _, err := rand.Read(rn.Entropy); err != nil {
		return rn, err
	}
	if withSecrets {
		env, digests, err := r.d.SecretEnv(vm.Function())
		rn.Secrets = env
		vm.SetSecretDigests(digests)
		if err != nil {
			return rn, err
		}
	}
	return rn, nil
}

// Renewed logs a renewal's answer a.
func (r *Restorer[V]) Renewed(vm V, a *agent.Reply) {
	r.d.Log.Debug("clone renewed", "vm", vm.VMID(), "guest_ms", a.DurationMS, "clock_step_ms", a.ClockStepMS)
	if a.Hook != nil && a.Hook.Error != nil {
		r.d.Log.Warn("on_restore failed; invocations of this vm report it", "vm", vm.VMID(), "function", vm.Function().Name, "err", a.Hook.Error)
	}
}
