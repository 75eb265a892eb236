package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/robfig/cron/v3"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"

	_ "time/tzdata" // time zones on hosts without a zoneinfo database
)

// Schedules: each firing is an asynchronous invocation. One node at a
// time (the holder of a lease in the leases bucket) fires them, and each
// tick is claimed by a compare-and-set of the schedule's last tick, so a
// tick fires at most once however many nodes there are.

// Missed-firing policies.
const (
	MissedSkip = "skip"
	MissedOnce = "once"
)

// missedGrace is how late a firing may be and still count as on time.
const missedGrace = 5 * time.Second

var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// parseCron reads a schedule's cron expression in its time zone.
func parseCron(spec, tz string) (cron.Schedule, *time.Location, error) {
	if strings.Contains(spec, "TZ=") {
		return nil, nil, fmt.Errorf("%w: cron %q: give the time zone apart (time_zone, --tz)", ErrInvalid, truncate(spec, 100))
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if loc, err = time.LoadLocation(tz); err != nil || tz == "Local" {
			return nil, nil, fmt.Errorf("%w: time zone %q is not an IANA time zone name (such as Europe/Zurich)", ErrInvalid, truncate(tz, 60))
		}
	}
	s, err := cronParser.Parse(spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: cron %q: %v (five fields minute to weekday, six with seconds first, or @hourly, @every 30s ...)", ErrInvalid, truncate(spec, 100), err)
	}
	return s, loc, nil
}

// CreateSchedule checks and stores a schedule; it fires from its next
// tick on.
func (t *Triggers) CreateSchedule(ctx context.Context, s wire.Schedule) (*wire.Schedule, error) {
	if err := validName("schedule", s.Name); err != nil {
		return nil, err
	}
	ref, err := daemon.ParseRef(s.Function)
	if err != nil {
		return nil, err
	}
	s.Function = ref.String()
	if _, _, err := parseCron(s.Cron, s.TimeZone); err != nil {
		return nil, err
	}
	if s.Missed, err = oneOf("missed", s.Missed, MissedSkip, MissedOnce); err != nil {
		return nil, err
	}
	if len(s.Event) > daemon.MaxEventBytes || (len(s.Event) > 0 && !json.Valid(s.Event)) {
		return nil, fmt.Errorf("%w: event must be JSON of at most %d bytes", ErrInvalid, daemon.MaxEventBytes)
	}
	if err := t.inv.CheckRef(ctx, s.Function); err != nil {
		return nil, err
	}
	s.CreatedAt, s.NextAt, s.LastAt = time.Now().UTC(), time.Time{}, time.Time{}
	b, _ := json.Marshal(s)
	if _, err := t.e.schedules.Create(ctx, s.Name, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("%w: schedule %s", ErrExists, s.Name)
		}
		return nil, fmt.Errorf("%w: store schedule: %v", ErrEngine, err)
	}
	_ = t.e.scheduleRuns.Purge(ctx, s.Name) // a schedule of the same name before
	t.log.Info("schedule created", "schedule", s.Name, "function", s.Function, "cron", s.Cron, "time_zone", s.TimeZone)
	return t.describe(ctx, &s), nil
}

func (t *Triggers) getSchedule(ctx context.Context, name string) (*wire.Schedule, uint64, error) {
	if err := validName("schedule", name); err != nil {
		return nil, 0, err
	}
	return getRecord[wire.Schedule](ctx, t.e.schedules, "schedule", name, fmt.Errorf("%w: schedule %s", ErrNotFound, name))
}

// GetSchedule describes a schedule with its last and next firing.
func (t *Triggers) GetSchedule(ctx context.Context, name string) (*wire.Schedule, error) {
	s, _, err := t.getSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	return t.describe(ctx, s), nil
}

// describe fills a schedule's last and next firing.
func (t *Triggers) describe(ctx context.Context, s *wire.Schedule) *wire.Schedule {
	last, _, _ := t.lastTick(ctx, s.Name)
	if !last.IsZero() {
		s.LastAt = last
	}
	if sched, loc, err := parseCron(s.Cron, s.TimeZone); err == nil && !s.Paused {
		from := time.Now()
		if last.After(from) {
			from = last
		}
		s.NextAt = sched.Next(from.In(loc)).UTC()
	}
	return s
}

// ListSchedules lists the schedules by name.
func (t *Triggers) ListSchedules(ctx context.Context) ([]*wire.Schedule, error) {
	return listRecords(ctx, t.e.schedules, t.GetSchedule)
}

// DeleteSchedule removes a schedule; it fires no more.
func (t *Triggers) DeleteSchedule(ctx context.Context, name string) error {
	if err := purgeRecord(ctx, t.e.schedules, "schedule", name, t.getSchedule); err != nil {
		return err
	}
	_ = t.e.scheduleRuns.Purge(ctx, name)
	t.log.Info("schedule deleted", "schedule", name)
	return nil
}

// PauseSchedule stops (paused) or resumes a schedule's firings; on
// resuming, the missed-firing policy says what becomes of the ticks
// missed meanwhile.
func (t *Triggers) PauseSchedule(ctx context.Context, name string, paused bool) (*wire.Schedule, error) {
	s, rev, err := t.getSchedule(ctx, name)
	if err != nil {
		return nil, err
	}
	s.Paused = paused
	b, _ := json.Marshal(s)
	if _, err := t.e.schedules.Update(ctx, name, b, rev); err != nil {
		return nil, fmt.Errorf("%w: schedule %s changed meanwhile, try again: %v", daemon.ErrConflict, name, err)
	}
	t.log.Info("schedule paused", "schedule", name, "paused", paused)
	return t.describe(ctx, s), nil
}

// lastTick is the schedule's last claimed tick and its revision (zero:
// never fired).
func (t *Triggers) lastTick(ctx context.Context, name string) (time.Time, uint64, error) {
	e, err := t.e.scheduleRuns.Get(ctx, name)
	if isNotFound(err) {
		return time.Time{}, 0, nil
	}
	if err != nil {
		return time.Time{}, 0, err
	}
	var at time.Time
	if err := at.UnmarshalText(e.Value()); err != nil {
		return time.Time{}, e.Revision(), nil
	}
	return at, e.Revision(), nil
}

// claim records tick as the schedule's last, if no node did since rev.
func (t *Triggers) claim(ctx context.Context, name string, tick time.Time, rev uint64) bool {
	b, _ := tick.UTC().MarshalText()
	var err error
	if rev == 0 {
		_, err = t.e.scheduleRuns.Create(ctx, name, b)
	} else {
		_, err = t.e.scheduleRuns.Update(ctx, name, b, rev)
	}
	return err == nil
}
