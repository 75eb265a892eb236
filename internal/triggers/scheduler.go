package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// The scheduler: the node holding the schedules' lease checks every
// schedule a few times a second and fires the ticks that are due.

const (
	leaseKey   = "schedules"
	schedTick  = 100 * time.Millisecond
	maxCatchUp = 1_000_000 // ticks walked to find a long-missed schedule's latest
)

type scheduler struct {
	t      *Triggers
	node   string
	leader bool
	rev    uint64 // the lease's revision while leader
	renew  time.Time
}

func newScheduler(t *Triggers) *scheduler {
	node := t.cfg.NodeName
	if node == "" {
		node = "thawd"
	}
	return &scheduler{t: t, node: node}
}

// Leading says whether this node fires the schedules now.
func (t *Triggers) Leading() bool { return t.m.leading.Load() }

func (s *scheduler) run(ctx context.Context) {
	tick := time.NewTicker(schedTick)
	defer tick.Stop()
	defer s.release()
	for {
		s.lease(ctx)
		if s.leader {
			s.fireDue(ctx, time.Now())
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// lease takes the lease if nobody holds it (or this node held it before
// a restart) and renews it at a third of its TTL.
func (s *scheduler) lease(ctx context.Context) {
	kv, ttl := s.t.e.leases, s.t.cfg.LeaseTTL
	if s.leader {
		if time.Since(s.renew) < ttl/3 {
			return
		}
		rev, err := kv.Update(ctx, leaseKey, []byte(s.node), s.rev)
		if err != nil {
			s.t.log.Warn("schedules: lease lost", "node", s.node, "err", err)
			s.setLeader(false)
			return
		}
		s.rev, s.renew = rev, time.Now()
		return
	}
	rev, err := kv.Create(ctx, leaseKey, []byte(s.node))
	if err != nil {
		e, gerr := kv.Get(ctx, leaseKey)
		if gerr != nil || string(e.Value()) != s.node {
			return
		}
		if rev, err = kv.Update(ctx, leaseKey, []byte(s.node), e.Revision()); err != nil {
			return
		}
	}
	s.rev, s.renew = rev, time.Now()
	s.setLeader(true)
}

func (s *scheduler) setLeader(v bool) {
	if s.leader != v {
		s.t.log.Info("schedules", "node", s.node, "leading", v)
	}
	s.leader = v
	s.t.m.leading.Store(v)
}

// release gives the lease up on stopping, so another node takes it at
// once.
func (s *scheduler) release() {
	if s.leader {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = s.t.e.leases.Delete(ctx, leaseKey)
		s.setLeader(false)
	}
}

// fireDue fires each active schedule's due tick.
func (s *scheduler) fireDue(ctx context.Context, now time.Time) {
	names, err := keys(ctx, s.t.e.schedules)
	if err != nil {
		if ctx.Err() == nil {
			s.t.log.Warn("schedules: list", "err", err)
		}
		return
	}
	for _, n := range names {
		sc, _, err := s.t.getSchedule(ctx, n)
		if err != nil || sc.Paused {
			continue
		}
		s.fireOne(ctx, sc, now)
	}
}

// fireOne fires a schedule's latest due tick: on time, or missed (no
// node ran it then) under its policy: skip fires nothing for missed
// ticks, once fires once for all of them.
func (s *scheduler) fireOne(ctx context.Context, sc *wire.Schedule, now time.Time) {
	sched, loc, err := parseCron(sc.Cron, sc.TimeZone)
	if err != nil {
		return
	}
	last, rev, err := s.t.lastTick(ctx, sc.Name)
	if err != nil {
		return
	}
	from := last
	if from.IsZero() {
		from = sc.CreatedAt
	}
	next := sched.Next(from.In(loc))
	if next.IsZero() || next.After(now) {
		return
	}
	latest, missed := next, 0
	for i := 0; i < maxCatchUp; i++ {
		n := sched.Next(latest)
		if n.IsZero() || n.After(now) {
			break
		}
		latest, missed = n, missed+1
	}
	late := now.Sub(latest) > missedGrace
	fire := !late || sc.Missed == MissedOnce
	if !s.t.claim(ctx, sc.Name, latest, rev) {
		return // another node claimed it
	}
	if missed > 0 || late {
		s.t.m.scheduleFiring(sc.Name, "missed")
		s.t.log.Info("schedule missed firings", "schedule", sc.Name, "missed", missed+boolInt(late), "policy", sc.Missed, "fired", fire)
	}
	if !fire {
		return
	}
	ev := sc.Event
	if len(ev) == 0 {
		ev, _ = json.Marshal(map[string]string{"schedule": sc.Name, "time": latest.UTC().Format(time.RFC3339)})
	}
	_, err = s.t.Enqueue(ctx, EnqueueRequest{Function: sc.Function, Event: ev, Schedule: sc.Name,
		msgID: "sched-" + sc.Name + "-" + strconv.FormatInt(latest.UnixNano(), 10)})
	if err != nil {
		s.t.m.scheduleFiring(sc.Name, "failed")
		if !errors.Is(err, context.Canceled) {
			s.t.log.Warn("schedule firing failed", "schedule", sc.Name, "tick", latest, "err", err)
		}
		return
	}
	s.t.m.scheduleFiring(sc.Name, "fired")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
