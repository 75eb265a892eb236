package fresh

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// readyOf lists the function's ready clones.
func (r *run) readyOf(ctx context.Context, s *subject) ([]client.VM, error) {
	vms, err := r.c.ListVMs(ctx)
	if err != nil {
		return nil, err
	}
	var out []client.VM
	for _, v := range vms {
		if v.Function == s.name && v.State == "ready" {
			out = append(out, v)
		}
	}
	return out, nil
}

// waitReady waits until the function has n ready clones, or as many as
// it had 10 s before (the daemon keeps no more), at most ReadyWait, and
// returns them.
func (r *run) waitReady(ctx context.Context, s *subject, n int) ([]client.VM, error) {
	deadline := time.Now().Add(r.cfg.ReadyWait)
	last, since := -1, time.Now()
	for {
		ready, err := r.readyOf(ctx, s)
		if err != nil || len(ready) >= n || time.Now().After(deadline) {
			return ready, err
		}
		if len(ready) != last {
			last, since = len(ready), time.Now()
		} else if len(ready) > 0 && time.Since(since) > 10*time.Second {
			return ready, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// trafficBursts is how many bursts of n, in distinct seconds, make the
// daemon keep n clones: it keeps enough for 92% of its window's requests
// (60 s by default) to have found one within a refill time, which the
// first members of a single burst do not reach.
const trafficBursts = 4

// hits: bursts of n by name make the daemon keep n clones; then each
// round (hitRound) sends a burst of n hits and times their refill.
func (r *run) hits(ctx context.Context, s *subject, n int) error {
	for range trafficBursts {
		next := time.Now().Add(1100 * time.Millisecond)
		if _, err := r.burst(ctx, s, "traffic", n, -1, r.byName(ctx, s)); err != nil {
			return err
		}
		time.Sleep(time.Until(next))
	}
	r.dropTraffic()
	for round := range r.cfg.Rounds {
		if err := r.hitRound(ctx, s, n, round); err != nil {
			return err
		}
	}
	return nil
}

// hitRound waits for n ready clones, lets them settle, sends a burst of n
// hits and records their refill (hitBurst). The clones' memory is
// measured before the last round's burst.
func (r *run) hitRound(ctx context.Context, s *subject, n, round int) error {
	ready, err := r.waitReady(ctx, s, n)
	if err != nil {
		return err
	}
	if len(ready) == 0 {
		return ErrNoReady
	}
	if round == r.cfg.Rounds-1 {
		if err := r.memory(ctx, s, ready); err != nil {
			return err
		}
	}
	time.Sleep(300 * time.Millisecond) // the last refill's VMM settles, as between requests that arrive apart
	refill, err := r.hitBurst(ctx, s, n, round)
	if err != nil || refill == nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Refills = append(r.res.Refills, *refill)
	return nil
}

// dropTraffic forgets the samples of the bursts that only made demand.
func (r *run) dropTraffic() {
	r.mu.Lock()
	defer r.mu.Unlock()
	kept := r.res.Samples[:0]
	for _, s := range r.res.Samples {
		if s.Mode != "traffic" {
			kept = append(kept, s)
		}
	}
	r.res.Samples = kept
}

// memory records what each ready clone's VMM holds, and what the daemon
// counts it against --standby-memory. That figure is the listing's own
// ready_memory_mib, clone by clone: exactly what the daemon charges (its
// VMM's PSS once ready, or the estimate it charges one not measured), with
// nothing to reconstruct. The alternative, thaw_ready_clones_memory_mib
// over the clones listed, would only give a mean, mixed across functions
// and read at another instant than the listing: inexact.
func (r *run) memory(ctx context.Context, s *subject, ready []client.VM) error {
	for _, v := range ready {
		m, err := r.c.VMMemory(ctx, v.ID)
		if errors.Is(err, client.ErrConflict) || errors.Is(err, client.ErrNotFound) {
			continue // taken or stopped since it was listed
		}
		if err != nil {
			return fmt.Errorf("memory of ready clone %s: %w", v.ID, err)
		}
		r.res.Memory = append(r.res.Memory, CloneMemory{Function: s.fc.Name, VM: v.ID, GuestMiB: v.MemoryMiB,
			CountedMiB: v.ReadyMemoryMiB, RSSMiB: mib(m.RSSBytes), PSSMiB: mib(m.PSSBytes), AnonMiB: mib(m.AnonBytes)})
	}
	return nil
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

// kept: VMs kept after the hits serve when no ready clone waits; each
// round stops the ready clones and sends a burst of n at once (requests
// no kept VM serves restore, and count as such).
func (r *run) kept(ctx context.Context, s *subject, n int) error {
	for round := range r.cfg.Rounds {
		ready, err := r.readyOf(ctx, s)
		if err != nil {
			return err
		}
		for _, v := range ready {
			_ = r.c.DeleteVM(ctx, v.ID) // a clone a fill just handed out is gone already
		}
		if _, err := r.burst(ctx, s, ModeKept, n, round, r.byName(ctx, s)); err != nil {
			return err
		}
	}
	return nil
}

// warm: n VMs restored and kept running, each burst one call on each.
func (r *run) warm(ctx context.Context, s *subject, n int) error {
	var ids []string
	defer func() {
		for _, id := range ids {
			_ = r.c.DeleteVM(context.WithoutCancel(ctx), id)
		}
	}()
	for range n {
		vm, err := r.c.RestoreVM(ctx, s.snap, "")
		if err != nil {
			return err
		}
		ids = append(ids, vm.ID)
	}
	for round := range r.cfg.Rounds {
		_, err := r.burst(ctx, s, ModeWarm, n, round, func(i int) (*client.Invocation, error) {
			return r.c.InvokeVM(ctx, ids[i], s.event, client.InvokeOptions{})
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// trace sends the trace's requests by name, each when it arrives, and
// samples the ready clones every 200 ms.
func (r *run) trace(ctx context.Context, s *subject) (*TraceResult, error) {
	tr := &TraceResult{Function: s.fc.Name, Trace: r.cfg.Trace}
	arrivals := Arrivals(r.cfg.Trace)
	reqs := make([]TraceRequest, len(arrivals))
	start := time.Now()
	done := make(chan struct{})
	sampled := make(chan []ReadySample)
	go func() { sampled <- r.sampleReady(ctx, s, start, done) }()
	wait := make(chan struct{}, len(arrivals))
	for i, at := range arrivals {
		time.Sleep(time.Until(start.Add(at)))
		go func() {
			defer func() { wait <- struct{}{} }()
			sent := time.Now()
			inv, err := r.c.InvokeFunction(ctx, s.name, s.event, client.InvokeOptions{})
			q := TraceRequest{AtMS: ms(sent.Sub(start)), ClientMS: ms(time.Since(sent)), Served: "error"}
			if err == nil && inv.OK {
				q.Served = inv.Mode
			}
			reqs[i] = q
		}()
	}
	for range arrivals {
		<-wait
	}
	close(done)
	tr.Ready, tr.Requests = <-sampled, reqs
	tr.Summarize()
	return tr, ctx.Err()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// sampleReady counts the function's ready clones, and the MiB the daemon
// counts them (memory), every 200 ms until done.
func (r *run) sampleReady(ctx context.Context, s *subject, start time.Time, done <-chan struct{}) []ReadySample {
	var out []ReadySample
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return out
		case <-tick.C:
			if ready, err := r.readyOf(ctx, s); err == nil {
				rs := ReadySample{AtMS: ms(time.Since(start)), Clones: len(ready)}
				for _, v := range ready {
					rs.MiB += v.ReadyMemoryMiB
				}
				out = append(out, rs)
			}
		}
	}
}
