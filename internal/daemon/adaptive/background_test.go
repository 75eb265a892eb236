package adaptive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// A set the cold starts drifted from is recorded again as an operation
// (with the prepare's input, or under traffic the invocation's), swapped
// in, and the document and metrics say so; under refresh off nothing
// starts.
func TestDriftRefreshesTheSet(t *testing.T) {
	for _, tc := range []struct{ mode, event string }{
		{wire.RefreshPrepare, `{"x":1}`}, {wire.RefreshTraffic, `{"from":"traffic"}`}} {
		t.Run(tc.mode, func(t *testing.T) {
			w := newWorld(t, Config{DefaultRefresh: tc.mode, PrepareAfter: -1})
			ctx := context.Background()
			w.function("echo")
			sn := w.snapshot("echo", 0, false, restore.REAP)
			w.m.KeepEvent(ctx, sn.ID, json.RawMessage(`{"x":1}`), false)
			for i := 0; i < policy.DriftCount; i++ {
				w.m.Observe(ctx, w.cold(sn, "reap", 100, 0.4))
			}
			ops := w.ops.wait()
			if len(ops) != 1 || ops[0].kind != wire.OpRefresh || ops[0].target != "echo:0 "+sn.ID || ops[0].err != nil {
				t.Fatalf("operations %+v", ops)
			}
			r := ops[0].res.Refresh
			if r.State != wire.OpSucceeded || r.Operation != ops[0].id || r.Source != tc.mode || len(r.Sets) != 1 || r.Sets[0].PagesAfter != 102 ||
				!strings.Contains(r.Reason, "reap: 5 of the last 5 cold starts touched more than 20% of their pages outside the recorded set (the last 40%)") {
				t.Fatalf("refresh %+v", r)
			}
			if g := readGen(filepath.Join(sn.Dir, "strategies", "reap", "set")); g != 2 || len(w.recorded) != 1 || w.recorded[0] != tc.event {
				t.Fatalf("generation %d in place, recorded with %q", g, w.recorded)
			}
			if left, _ := filepath.Glob(filepath.Join(sn.Dir, ".staging-*")); len(left) != 0 || len(w.art.swapped) != 1 {
				t.Fatalf("staging left %v, swapped %v", left, w.art.swapped)
			}
			if want := filepath.Join(sn.Dir, "strategies", "reap"); len(w.art.trusted) != 1 || w.art.trusted[0] != want {
				t.Fatalf("trusted %v, want the swapped set %s", w.art.trusted, want)
			}
			v := w.doc("echo")
			if len(v.Refreshes) != 1 || v.Refreshes[0].State != wire.OpSucceeded || len(v.Drift) != 0 {
				t.Fatalf("document %+v", v)
			}
			if w.metrics.count("refresh reap "+tc.mode+" ok") != 1 || w.metrics.count("setuse reap 0.40") != policy.DriftCount {
				t.Fatalf("metrics %v", w.metrics.counts)
			}
		})
	}
	w := newWorld(t, Config{DefaultRefresh: wire.RefreshOff, PrepareAfter: -1})
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP)
	for i := 0; i < 2*policy.DriftCount; i++ {
		w.m.Observe(context.Background(), w.cold(sn, "reap", 100, 0.4))
	}
	if ops := w.ops.wait(); len(ops) != 0 {
		t.Fatalf("refresh off started %+v", ops)
	}
	if d := w.doc("echo").Drift; len(d) != 1 || d[0].Drifted != 2*policy.DriftCount {
		t.Fatalf("drift under refresh off %+v", d)
	}
}

// A refresh that fails leaves the old set, says why (a full disk is
// ErrNoSpace), is counted, and holds further refreshes off for the
// backoff.
func TestFailedRefreshBacksOff(t *testing.T) {
	w := newWorld(t, Config{DefaultRefresh: wire.RefreshPrepare, PrepareAfter: -1})
	w.refreshErr = fmt.Errorf("write set: %w", syscall.ENOSPC)
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP)
	w.m.KeepEvent(ctx, sn.ID, nil, false)
	for i := 0; i < policy.DriftCount; i++ {
		w.m.Observe(ctx, w.cold(sn, "reap", 100, 0.5))
	}
	w.ops.wait()
	for i := 0; i < 2*policy.DriftCount; i++ { // drifted again, within the backoff
		w.m.Observe(ctx, w.cold(sn, "reap", 100, 0.5))
	}
	ops := w.ops.wait()
	if len(ops) != 1 || !errors.Is(ops[0].err, errdefs.ErrNoSpace) {
		t.Fatalf("operations %+v", ops)
	}
	r := w.doc("echo").Refreshes
	if len(r) != 1 || r[0].State != wire.OpFailed || !strings.Contains(r[0].Error, "no space left for thaw's data") || r[0].EndedAt.IsZero() {
		t.Fatalf("refreshes %+v", r)
	}
	if g := readGen(filepath.Join(sn.Dir, "strategies", "reap", "set")); g != 1 || len(w.art.swapped) != 0 {
		t.Fatalf("generation %d in place after a failed refresh, swapped %v", g, w.art.swapped)
	}
	if left, _ := filepath.Glob(filepath.Join(sn.Dir, ".staging-*")); len(left) != 0 {
		t.Fatalf("staging left %v", left)
	}
	if w.metrics.count("refresh reap prepare failed") != 1 {
		t.Fatalf("metrics %v", w.metrics.counts)
	}
}

// Without the prepare's record input a refresh under prepare cannot run:
// it fails saying so, and the strategy is held (only traffic would help).
func TestRefreshWithoutRecordInputIsHeld(t *testing.T) {
	w := newWorld(t, Config{DefaultRefresh: wire.RefreshPrepare, PrepareAfter: -1, Backoff: time.Nanosecond})
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP)
	for i := 0; i < policy.DriftCount; i++ {
		w.m.Observe(ctx, w.cold(sn, "reap", 100, 0.5))
	}
	if ops := w.ops.wait(); len(ops) != 1 || !errors.Is(ops[0].err, errdefs.ErrConflict) || !strings.Contains(ops[0].err.Error(), "no record input is kept") {
		t.Fatalf("operations %+v", ops)
	}
	for i := 0; i < policy.DriftCount; i++ {
		w.m.Observe(ctx, w.cold(sn, "reap", 100, 0.5))
	}
	if ops := w.ops.wait(); len(ops) != 1 {
		t.Fatalf("a held strategy was refreshed again: %+v", ops)
	}
	if d := w.doc("echo").Drift; len(d) != 1 || !strings.Contains(d[0].Held, "no record input is kept") {
		t.Fatalf("drift %+v", d)
	}
}

// A version whose snapshot has no artifacts is prepared in the background
// after PrepareAfter cold starts under auto, with the invocation's input
// under refresh traffic (used once) and none otherwise; once prepared, it
// is not prepared again while its warm snapshot exists.
func TestBackgroundPrepareAfterColdStarts(t *testing.T) {
	for _, tc := range []struct {
		refresh, event string
		fromTraffic    bool
	}{{wire.RefreshPrepare, "null", false}, {wire.RefreshTraffic, `{"from":"traffic"}`, true}} {
		t.Run(tc.refresh, func(t *testing.T) {
			w := newWorld(t, Config{DefaultStrategy: wire.StrategyAuto, DefaultRefresh: tc.refresh, PrepareAfter: 2})
			ctx := context.Background()
			w.function("echo")
			sn := w.snapshot("echo", 0, false)
			w.m.Observe(ctx, w.cold(sn, "vanilla", 100, 0))
			if ops := w.ops.wait(); len(ops) != 0 {
				t.Fatalf("prepared after one cold start: %+v", ops)
			}
			w.m.Observe(ctx, w.cold(sn, "vanilla", 100, 0))
			ops := w.ops.wait()
			if len(ops) != 1 || ops[0].kind != wire.OpPrepare || ops[0].target != "echo" || ops[0].err != nil {
				t.Fatalf("operations %+v", ops)
			}
			if len(w.prepares) != 1 || w.prepares[0] != (prepareCall{ref: "echo", event: tc.event, fromTraffic: tc.fromTraffic}) {
				t.Fatalf("prepares %+v", w.prepares)
			}
			p := w.doc("echo").Prepare
			if p == nil || p.State != wire.OpSucceeded || p.Operation != ops[0].id || p.Snapshot != ops[0].res.Prepare.Warm.ID ||
				!strings.Contains(p.Reason, "2 cold starts under auto restored "+sn.ID) {
				t.Fatalf("prepare %+v", p)
			}
			for i := 0; i < 3; i++ {
				w.m.Observe(ctx, w.cold(sn, "vanilla", 100, 0))
			}
			if ops := w.ops.wait(); len(ops) != 1 || w.metrics.count("prepare succeeded") != 1 {
				t.Fatalf("prepared again: %+v", ops)
			}
		})
	}
}

// The work a stopped daemon left running is marked interrupted at the
// next start, and what its refreshes staged is removed.
func TestRecoverMarksInterrupted(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP)
	st := restoreState{Refreshes: []wire.WorkingSetRefresh{{Operation: "op-1", Snapshot: sn.ID, Strategies: []string{"reap"}, State: wire.OpRunning},
		{Operation: "op-0", State: wire.OpSucceeded}},
		Prepare: &wire.BackgroundPrepare{Operation: "op-2", State: wire.OpRunning}}
	fn, _ := w.db.GetFunction(ctx, "echo")
	st.FunctionCreated = fn.CreatedAt
	b, _ := json.Marshal(st)
	if err := w.db.PutRestoreState(ctx, "echo", 0, b); err != nil {
		t.Fatal(err)
	}
	w.art.leftover = 2
	if err := w.m.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	v := w.doc("echo")
	if r := v.Refreshes; len(r) != 2 || r[1].State != "interrupted" || r[1].EndedAt.IsZero() ||
		!strings.Contains(r[1].Error, "the daemon stopped during the refresh") || r[0].State != wire.OpSucceeded {
		t.Fatalf("refreshes %+v", r)
	}
	if p := v.Prepare; p.State != "interrupted" || p.Error != "the daemon stopped during the prepare" {
		t.Fatalf("prepare %+v", p)
	}
}

// A refresh asked for records the named sets again now with the given
// input, or refuses at once what it cannot do.
func TestRefreshAskedFor(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP, restore.FaaSnap)
	for _, tc := range []struct {
		req  RefreshRequest
		kind error
		says string
	}{
		{RefreshRequest{Function: "echo", Strategies: []string{"snapbpf"}}, errdefs.ErrInvalid, `no recorded set of strategy "snapbpf" (it has: reap, faasnap)`},
		{RefreshRequest{Function: "echo", Event: json.RawMessage(`{`)}, errdefs.ErrInvalid, "not valid JSON"},
		{RefreshRequest{Function: "none"}, errdefs.ErrNotFound, ""},
	} {
		if _, err := w.m.RefreshWorkingSets(ctx, tc.req); !errors.Is(err, tc.kind) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v", tc.req, err)
		}
	}
	r, err := w.m.RefreshWorkingSets(ctx, RefreshRequest{Function: "echo", Event: json.RawMessage(`{"x":9}`), Strategies: []string{"reap"}})
	if err != nil || r.State != wire.OpSucceeded || r.Source != "request" || !strings.HasPrefix(r.Operation, "request-") ||
		len(r.Sets) != 1 || r.Sets[0].PagesAfter != 102 || len(w.recorded) != 1 || w.recorded[0] != `{"x":9}` {
		t.Fatalf("refresh: %v %+v", err, r)
	}
	if rs := w.doc("echo").Refreshes; len(rs) != 1 || rs[0].Reason != "asked for" || rs[0].Snapshot != sn.ID {
		t.Fatalf("refreshes %+v", rs)
	}
	// One at a time per version, background work included.
	k := verKey{"echo", 0}
	if !w.m.claim(k) {
		t.Fatal("claim")
	}
	if _, err := w.m.RefreshWorkingSets(ctx, RefreshRequest{Function: "echo"}); !errors.Is(err, errdefs.ErrConflict) ||
		!strings.Contains(err.Error(), "a refresh or prepare of echo:0 is running") {
		t.Fatalf("busy: %v", err)
	}
	w.m.release(k)
	w.function("plain")
	w.snapshot("plain", 0, false)
	w.function("lazy")
	w.snapshot("lazy", 0, true, restore.REAP)
	for fn, says := range map[string]string{"plain": "no recorded working set to refresh: prepare plain first", "lazy": "memory is in the registry"} {
		if _, err := w.m.CheckRefresh(ctx, RefreshRequest{Function: fn}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), says) {
			t.Errorf("%s: %v", fn, err)
		}
	}
}

// A refresh started as an operation is refused before it starts when it
// cannot run, and else is recorded under the operation's id.
func TestStartRefresh(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP)
	start := func(_ context.Context, kind, target string, work func(context.Context) (*wire.OperationResult, error)) (string, error) {
		return w.ops.start(kind, target, work), nil
	}
	same := func(id string) string { return id }
	if _, err := StartRefresh(ctx, w.m, RefreshRequest{Function: "none"}, start, same); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("refresh of no function: %v", err)
	}
	if ops := w.ops.wait(); len(ops) != 0 {
		t.Fatalf("operations started for a refused refresh: %+v", ops)
	}
	id, err := StartRefresh(ctx, w.m, RefreshRequest{Function: "echo", Event: json.RawMessage(`{"x":1}`)}, start, same)
	if err != nil {
		t.Fatal(err)
	}
	ops := w.ops.wait()
	if len(ops) != 1 || ops[0].id != id || ops[0].kind != wire.OpRefresh || ops[0].target != "echo" || ops[0].err != nil {
		t.Fatalf("operations %+v", ops)
	}
	if r := ops[0].res.Refresh; r.Operation != id || r.State != wire.OpSucceeded || r.Snapshot != sn.ID {
		t.Fatalf("refresh %+v", r)
	}
	if rs := w.doc("echo").Refreshes; len(rs) != 1 || rs[0].Operation != id {
		t.Fatalf("refreshes %+v", rs)
	}
}

// Background prepares and refreshes hold a daemon-wide budget besides the
// one per version: one that would pass it is not started, and the budget
// is free again when one ends; a budget out of range is refused.
func TestBackgroundBudget(t *testing.T) {
	m := New(Config{MaxBackground: 2}, Deps{})
	one, two, three := verKey{"a", 1}, verKey{"b", 1}, verKey{"c", 2}
	if !m.claim(one) || m.claim(one) {
		t.Fatal("a version runs one background work at a time")
	}
	if !m.claim(two) || m.claim(three) {
		t.Fatal("a third claim passed a budget of 2")
	}
	m.release(one)
	if !m.claim(three) || m.claim(one) {
		t.Fatal("a released claim did not free its room")
	}
	if d := New(Config{}, Deps{}); d.cfg.MaxBackground != DefaultMaxBackground {
		t.Fatalf("default budget %d", d.cfg.MaxBackground)
	}
	for _, n := range []int{-1, 65} {
		errs := Config{DefaultStrategy: wire.StrategyAuto, DefaultRefresh: wire.RefreshPrepare, MaxBackground: n}.Validate()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), "give 0 (the default, 1) or 1-64") {
			t.Fatalf("budget %d: %v", n, errs)
		}
	}
}

// A version's document keeps its newest refreshes, updated in place by
// operation.
func TestAppendRefreshKeepsTheNewest(t *testing.T) {
	var list []wire.WorkingSetRefresh
	for i := 0; i < maxRefreshes+3; i++ {
		list = appendRefresh(list, wire.WorkingSetRefresh{Operation: fmt.Sprint("op-", i), State: wire.OpRunning})
	}
	if len(list) != maxRefreshes || list[0].Operation != "op-3" || list[maxRefreshes-1].Operation != fmt.Sprint("op-", maxRefreshes+2) {
		t.Fatalf("kept %+v", list)
	}
	list = appendRefresh(list, wire.WorkingSetRefresh{Operation: "op-5", State: wire.OpSucceeded})
	if len(list) != maxRefreshes || list[2].Operation != "op-5" || list[2].State != wire.OpSucceeded {
		t.Fatalf("updated %+v", list)
	}
}
