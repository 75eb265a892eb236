package fresh

import (
	"context"
	"time"

	"github.com/thaw-dev/thaw/client"
)

// A refill is timed from the burst's takes, not from its end: a hit that
// outlasts the refill finds the pool full again when it is answered, and
// a wait begun then reads 0. The function's ready clones are listed from
// the burst's start, and the pool is full again at the first listing,
// after the first take, of n ready clones none of which the burst took
// (a listing that still shows a clone the burst took predates its take).

// pollEvery is how often the ready clones are listed while a refill is
// timed (and waited for).
const pollEvery = 50 * time.Millisecond

// stallAfter: a refill whose ready clones have not changed for this long
// (some ready) is not waited for any longer: the daemon keeps fewer.
const stallAfter = 10 * time.Second

// readyPoll is the function's ready clones as one listing gave them.
type readyPoll struct {
	at  time.Time // the listing's answer arrived
	ids []string
}

// hitBurst sends a burst of n hits while listing the function's ready
// clones, then waits for the pool to be full again; the refill is nil if
// a request of the burst took no clone (no refill of n clones to time),
// or if the pool was not full again within ReadyWait.
func (r *run) hitBurst(ctx context.Context, s *subject, n, round int) (*Refill, error) {
	stop := make(chan struct{})
	polled := make(chan []readyPoll, 1)
	go func() { polled <- r.pollReady(ctx, s, stop) }()
	calls, err := r.burst(ctx, s, ModeHit, n, round, r.byName(ctx, s))
	close(stop)
	polls := <-polled
	if err != nil {
		return nil, err
	}
	taken, from := takesOf(calls)
	if len(taken) < n {
		return nil, nil
	}
	at, ok, err := r.awaitRefill(ctx, s, polls, taken, n, from)
	if err != nil || !ok {
		return nil, err
	}
	return &Refill{Function: s.fc.Name, Concurrency: n, MS: ms(at.Sub(from))}, nil
}

// pollReady lists s's ready clones every pollEvery until stop is closed
// (a listing that fails is left out).
func (r *run) pollReady(ctx context.Context, s *subject, stop <-chan struct{}) []readyPoll {
	var out []readyPoll
	for {
		if ready, err := r.readyOf(ctx, s); err == nil {
			out = append(out, readyPoll{at: time.Now(), ids: idsOf(ready)})
		}
		select {
		case <-stop:
			return out
		case <-ctx.Done():
			return out
		case <-time.After(pollEvery):
		}
	}
}

// awaitRefill lists s's ready clones after polls until the pool is full
// again (refilledAt), ReadyWait after from, or its ready clones stall.
func (r *run) awaitRefill(ctx context.Context, s *subject, polls []readyPoll, taken map[string]bool, n int, from time.Time) (time.Time, bool, error) {
	deadline := from.Add(r.cfg.ReadyWait)
	last, since := -1, time.Now()
	for {
		if at, ok := refilledAt(polls, taken, n, from); ok {
			return at, true, nil
		}
		if len(polls) > 0 {
			if now := len(polls[len(polls)-1].ids); now != last {
				last, since = now, time.Now()
			} else if now > 0 && time.Since(since) > stallAfter {
				return time.Time{}, false, nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, false, nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, false, ctx.Err()
		case <-time.After(pollEvery):
		}
		ready, err := r.readyOf(ctx, s)
		if err != nil {
			return time.Time{}, false, err
		}
		polls = append(polls, readyPoll{at: time.Now(), ids: idsOf(ready)})
	}
}

// refilledAt is when the pool was full again after a burst's takes: the
// first of polls, at or after from (the first take), that lists n ready
// clones or more of which none is in taken; false if none does.
func refilledAt(polls []readyPoll, taken map[string]bool, n int, from time.Time) (time.Time, bool) {
next:
	for _, p := range polls {
		if p.at.Before(from) || len(p.ids) < n {
			continue
		}
		for _, id := range p.ids {
			if taken[id] {
				continue next
			}
		}
		return p.at, true
	}
	return time.Time{}, false
}

// takesOf is the clones a burst's hits took and when the first was taken:
// its request sent plus the daemon's take_ms (the request received to the
// clone in hand).
func takesOf(calls []sentCall) (taken map[string]bool, first time.Time) {
	taken = map[string]bool{}
	for _, c := range calls {
		if c.inv.Mode != servedAs[ModeHit] {
			continue
		}
		taken[c.inv.VM] = true
		at := c.at
		if rn := c.inv.Timing.Ready; rn != nil {
			at = at.Add(time.Duration(rn.TakeMS * float64(time.Millisecond)))
		}
		if first.IsZero() || at.Before(first) {
			first = at
		}
	}
	return taken, first
}

func idsOf(vms []client.VM) []string {
	ids := make([]string, len(vms))
	for i, v := range vms {
		ids[i] = v.ID
	}
	return ids
}
