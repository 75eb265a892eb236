package triggers

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// scheduleEvents are the ticks a schedule's invocations carried.
func scheduleTicks(inv *testInvoker, fn string) []string {
	var out []string
	for _, c := range inv.callsOf(fn) {
		var ev struct{ Time string }
		_ = json.Unmarshal(c.event, &ev)
		out = append(out, ev.Time)
	}
	return out
}

func TestScheduleFiresEverySecond(t *testing.T) {
	inv := newTestInvoker()
	inv.set("tick", echo)
	tr := openTest(t, "", inv, nil)
	ctx := context.Background()
	waitFor(t, 10*time.Second, "schedule lease", tr.Leading)
	// Start on a second boundary, count for 10 s.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	s, err := tr.CreateSchedule(ctx, wire.Schedule{Name: "every-second", Function: "tick", Cron: "* * * * * *"})
	if err != nil {
		t.Fatal(err)
	}
	if s.NextAt.IsZero() || s.Missed != MissedSkip {
		t.Fatalf("schedule: %+v", s)
	}
	time.Sleep(10 * time.Second)
	if _, err := tr.PauseSchedule(ctx, "every-second", true); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	ticks := scheduleTicks(inv, "tick")
	if n := len(ticks); n < 9 || n > 11 {
		t.Fatalf("%d firings in 10 s: %v", n, ticks)
	}
	seen := map[string]bool{}
	for _, tk := range ticks {
		if seen[tk] {
			t.Fatalf("tick %s fired twice", tk)
		}
		seen[tk] = true
	}
	// Paused: nothing more; resumed with skip: the missed ticks stay missed.
	time.Sleep(2 * time.Second)
	if n := len(inv.callsOf("tick")); n != len(ticks) {
		t.Fatalf("paused schedule fired (%d -> %d)", len(ticks), n)
	}
	got, _ := tr.GetSchedule(ctx, "every-second")
	if !got.Paused || got.LastAt.IsZero() {
		t.Fatalf("paused schedule: %+v", got)
	}
	if _, err := tr.PauseSchedule(ctx, "every-second", false); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if n := len(inv.callsOf("tick")) - len(ticks); n < 1 || n > 4 { // the tick due at resuming, then one a second
		t.Fatalf("%d firings in 2.5 s after resuming", n)
	}
	if err := tr.DeleteSchedule(ctx, "every-second"); err != nil {
		t.Fatal(err)
	}
}

func TestScheduleMissedPolicy(t *testing.T) {
	for _, policy := range []string{MissedSkip, MissedOnce} {
		t.Run(policy, func(t *testing.T) {
			// The schedule fires at every minute's second 0: start clear of
			// it and of the grace after it (a tick that late is on time),
			// so only the missed ticks' policy can fire in the test.
			clear := missedGrace + 2*time.Second // past second 0 and its grace
			switch at := time.Duration(time.Now().Second()) * time.Second; {
			case at >= 45*time.Second:
				time.Sleep(time.Minute - at + clear)
			case at < clear:
				time.Sleep(clear - at)
			}
			inv := newTestInvoker()
			inv.set("hourly", echo)
			tr := openTest(t, "", inv, nil)
			ctx := context.Background()
			// A schedule whose last tick was 10 min ago: 9 ticks missed.
			if _, err := tr.CreateSchedule(ctx, wire.Schedule{Name: "m", Function: "hourly", Cron: "0 * * * * *", Missed: policy}); err != nil {
				t.Fatal(err)
			}
			_, rev, _ := tr.lastTick(ctx, "m")
			if !tr.claim(ctx, "m", time.Now().Add(-10*time.Minute).Truncate(time.Minute), rev) {
				t.Fatal("claim")
			}
			waitFor(t, 10*time.Second, "catch-up", func() bool {
				last, _, _ := tr.lastTick(ctx, "m")
				return time.Since(last) < 2*time.Minute
			})
			time.Sleep(500 * time.Millisecond)
			want := map[string]int{MissedSkip: 0, MissedOnce: 1}[policy]
			if n := len(inv.callsOf("hourly")); n != want {
				t.Fatalf("%s: %d firings for the missed ticks, want %d", policy, n, want)
			}
		})
	}
}

func TestScheduleBadInput(t *testing.T) {
	inv := newTestInvoker()
	inv.set("fn", echo)
	tr := openTest(t, "", inv, nil)
	ctx := context.Background()
	for _, s := range []wire.Schedule{
		{Name: "a", Function: "fn", Cron: "*/5 * * *"},        // four fields
		{Name: "a", Function: "fn", Cron: "61 * * * *"},       // out of range
		{Name: "a", Function: "fn", Cron: "TZ=UTC * * * * *"}, // zone inside
		{Name: "a", Function: "fn", Cron: "* * * * *", TimeZone: "Mars/Olympus"},
		{Name: "a", Function: "fn", Cron: "* * * * *", Missed: "twice"},
		{Name: "a", Function: "fn", Cron: "* * * * *", Event: json.RawMessage(`{`)},
		{Name: "A!", Function: "fn", Cron: "* * * * *"},
		{Name: "a", Function: "ghost", Cron: "* * * * *"},
	} {
		if _, err := tr.CreateSchedule(ctx, s); !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) {
			t.Errorf("%+v: %v", s, err)
		}
	}
	if l, _ := tr.ListSchedules(ctx); len(l) != 0 {
		t.Fatalf("bad schedules were kept: %+v", l)
	}
	s, err := tr.CreateSchedule(ctx, wire.Schedule{Name: "zurich", Function: "fn", Cron: "0 9 * * 1-5", TimeZone: "Europe/Zurich"})
	if err != nil {
		t.Fatal(err)
	}
	loc, _ := time.LoadLocation("Europe/Zurich")
	if h := s.NextAt.In(loc).Hour(); h != 9 {
		t.Fatalf("next firing at %s (hour %d in Zurich)", s.NextAt, h)
	}
	if _, err := tr.CreateSchedule(ctx, wire.Schedule{Name: "zurich", Function: "fn", Cron: "@hourly"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
}
