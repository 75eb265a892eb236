package snapshots

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// prepWorld is a preparer over w's snapshots whose VMs are fakes: a boot
// is a VM record, a snapshot of a VM is a snapshot of w's fake source.
type prepWorld struct {
	*world
	p       *Preparer
	calls   []string // what the preparer asked of the daemon, in order
	snapErr error    // fails the clean snapshot
}

// testStrategies: a strategy without a record step, one that records
// (listed first) and the Warm one, which restores the clean snapshot,
// invokes it and takes the warm snapshot.
func (pw *prepWorld) testStrategies() []restore.Strategy {
	return []restore.Strategy{
		{Kind: restore.Vanilla},
		{Kind: restore.REAP, Record: func(ctx context.Context, h restore.RecordHost, p *restore.Prepare) error {
			pw.calls = append(pw.calls, "record reap on "+p.Warm.Manifest.ID)
			p.SetBuild(restore.REAP, map[string]int{"faulted_pages": 7})
			return nil
		}, Finish: func(p *restore.Prepare) error { pw.calls = append(pw.calls, "finish reap"); return nil }},
		{Kind: restore.FaaSnap, Warm: true, Record: func(ctx context.Context, h restore.RecordHost, p *restore.Prepare) error {
			vm, err := h.Restore(ctx, p.Clean, nil)
			if err != nil {
				return err
			}
			defer vm.Close()
			if err := vm.Invoke(ctx); err != nil {
				return err
			}
			p.Warm, err = vm.Snapshot(ctx)
			return err
		}},
	}
}

func newPrepWorld(t *testing.T) *prepWorld {
	pw := &prepWorld{world: newWorld(t, nil)}
	pw.p = NewPreparer(pw.m, PrepareDeps{Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Strategies: pw.testStrategies(),
		ConfigOf: func(ctx context.Context, ref string) (*catalog.Function, int, string, error) {
			name, _, _ := strings.Cut(ref, ":")
			if name != "hello" {
				return nil, 0, "", fmt.Errorf("%w: function %s", errdefs.ErrNotFound, name)
			}
			return pw.fn, 4, name, nil
		},
		Boot: func(ctx context.Context, fn *catalog.Function, version int) (*catalog.VM, error) {
			pw.calls = append(pw.calls, fmt.Sprintf("boot %s %d", fn.Name, version))
			return &catalog.VM{ID: "vm-0123456789ab", BootMS: 5}, nil
		},
		Snapshot: func(ctx context.Context, vmID string) (*catalog.Snapshot, error) {
			pw.calls = append(pw.calls, "snapshot "+vmID)
			if pw.snapErr != nil {
				return nil, pw.snapErr
			}
			return pw.m.Take(ctx, pw.source(4))
		},
		DeleteVM: func(ctx context.Context, id string) error { pw.calls = append(pw.calls, "delete "+id); return nil },
		Host: func(function string, event json.RawMessage, timeout time.Duration) restore.RecordHost {
			return recordHost{pw, string(event), timeout}
		},
		KeepEvent: func(ctx context.Context, warm string, event json.RawMessage, fromTraffic bool) {
			pw.calls = append(pw.calls, fmt.Sprintf("keep %s event for %s, from traffic %v", event, warm, fromTraffic))
		},
		AutoPush:   func(ctx context.Context, id string) { pw.calls = append(pw.calls, "push "+id) },
		CheckEvent: func(ev json.RawMessage) error { return checkJSON(ev) },
		Timeout: func(d time.Duration) (time.Duration, error) {
			if d == 0 {
				return 30 * time.Second, nil
			}
			return d, nil
		},
		Body: func(sn *catalog.Snapshot) *wire.Snapshot { return &wire.Snapshot{ID: sn.ID, Parent: sn.Parent} },
		TracePrepare: func(ctx context.Context, function string) (context.Context, func(error)) {
			return ctx, func(err error) { pw.calls = append(pw.calls, fmt.Sprintf("span prepare %s: %v", function, err)) }
		}})
	return pw
}

func checkJSON(ev json.RawMessage) error {
	if len(ev) > 0 && !json.Valid(ev) {
		return fmt.Errorf("%w: event is not JSON", errdefs.ErrInvalid)
	}
	return nil
}

// recordHost restores nothing: its VMs record what they are asked and
// snapshot w's fake source.
type recordHost struct {
	pw      *prepWorld
	event   string
	timeout time.Duration
}

func (h recordHost) Restore(ctx context.Context, snap restore.Snapshot, _ restore.BeginFunc) (restore.RecordVM, error) {
	h.pw.calls = append(h.pw.calls, "restore "+snap.Manifest.ID)
	return recordVM{h}, nil
}

type recordVM struct{ h recordHost }

func (v recordVM) Invoke(context.Context) error {
	v.h.pw.calls = append(v.h.pw.calls, fmt.Sprintf("invoke %s within %s", v.h.event, v.h.timeout))
	return nil
}

func (v recordVM) Snapshot(ctx context.Context) (restore.Snapshot, error) {
	sn, err := v.h.pw.m.Take(ctx, v.h.pw.source(4))
	if err != nil {
		return restore.Snapshot{}, err
	}
	return StrategySnapshot(sn)
}

func (v recordVM) Close() { v.h.pw.calls = append(v.h.pw.calls, "close record vm") }

func TestPrepareRunsTheWarmStepFirst(t *testing.T) {
	pw := newPrepWorld(t)
	ctx := context.Background()
	res, err := pw.p.Prepare(ctx, PrepareRequest{Function: "hello:live", RecordEvent: json.RawMessage(`{"n":1}`), FromTraffic: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Function != "hello" || res.Clean == nil || res.Warm == nil || res.Warm.Parent != res.Clean.ID || res.Timing.BootMS != 5 {
		t.Fatalf("result %+v", res)
	}
	want := []string{"boot hello 4", "snapshot vm-0123456789ab", "delete vm-0123456789ab", "restore " + res.Clean.ID,
		`invoke {"n":1} within 30s`, "close record vm", "record reap on " + res.Warm.ID, "finish reap",
		fmt.Sprintf(`keep {"n":1} event for %s, from traffic true`, res.Warm.ID), "push " + res.Warm.ID, "span prepare hello: <nil>"}
	if !slices.Equal(pw.calls, want) {
		t.Errorf("calls\n%q\nwant\n%q", pw.calls, want)
	}
	warm, err := pw.m.Get(ctx, res.Warm.ID)
	if err != nil || warm.Parent != res.Clean.ID {
		t.Fatalf("warm %+v, %v", warm, err)
	}
	var kept wire.PrepareResult
	if err := json.Unmarshal(warm.Prepared, &kept); err != nil || kept.Warm.ID != res.Warm.ID || kept.Prepared["reap"] == nil ||
		string(kept.Prepared["reap"].Build) != `{"faulted_pages":7}` {
		t.Errorf("prepare result kept with the warm snapshot: %s (%v)", warm.Prepared, err)
	}
}

func TestPrepareOfADeployPushesNothing(t *testing.T) {
	pw := newPrepWorld(t)
	req := PrepareRequest{Function: "hello"}
	timeout, err := pw.p.CheckOptions(&req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pw.p.PrepareWith(context.Background(), req, timeout, pw.fn, -1); err != nil {
		t.Fatal(err)
	}
	for _, c := range pw.calls {
		if strings.HasPrefix(c, "push ") {
			t.Errorf("a deploy's prepare pushed: %q", pw.calls)
		}
	}
}

func TestPrepareFailures(t *testing.T) {
	pw := newPrepWorld(t)
	ctx := context.Background()
	if _, err := pw.p.Prepare(ctx, PrepareRequest{Function: "nope"}); !errors.Is(err, errdefs.ErrNotFound) || len(pw.calls) != 0 {
		t.Errorf("unknown function: %v; calls %q", err, pw.calls)
	}
	pw.snapErr = errors.New("disk on fire")
	if _, err := pw.p.Prepare(ctx, PrepareRequest{Function: "hello"}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("clean snapshot failure: %v", err)
	}
	if !slices.Contains(pw.calls, "delete vm-0123456789ab") {
		t.Errorf("the booted VM stays after a failed snapshot: %q", pw.calls)
	}
}

func TestPrepareChecksItsOptions(t *testing.T) {
	pw := newPrepWorld(t)
	req := PrepareRequest{Function: "hello"}
	if d, err := pw.p.CheckOptions(&req); err != nil || d != 30*time.Second || req.GroupSize != 1024 || req.MergeGap != 32 {
		t.Fatalf("defaults: %+v, %s, %v", req, d, err)
	}
	for _, req := range []PrepareRequest{{GroupSize: -1}, {GroupSize: 1<<20 + 1}, {MergeGap: -1}, {RecordEvent: json.RawMessage(`{`)}} {
		if _, err := pw.p.CheckOptions(&req); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%+v: %v, want ErrInvalid", req, err)
		}
	}
	pw.p.d.Strategies = pw.p.d.Strategies[:2] // no Warm step
	if _, err := pw.p.CheckOptions(&PrepareRequest{}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("without a warm step: %v, want ErrConflict", err)
	}
}

func TestRecordOrder(t *testing.T) {
	pw := newPrepWorld(t)
	var kinds []restore.Kind
	for _, st := range RecordOrder(pw.testStrategies()) {
		kinds = append(kinds, st.Kind)
	}
	if !slices.Equal(kinds, []restore.Kind{restore.FaaSnap, restore.REAP}) {
		t.Errorf("record order %v", kinds)
	}
}
