package versions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/wire"
)

// A version is stale when what its snapshots were built from differs from
// what the daemon runs; the reason names each difference, and its metric
// label the first.
func TestStaleReasons(t *testing.T) {
	was := BuildInputs{Image: "0123456789abcdef", Kernel: "k1", Rootfs: "r1", Initrd: "i1", Cmdline: "console=ttyS0",
		Machine: "pc-i440fx-7.2", VMM: "qemu 7.2.22", Accel: "tcg"}
	for _, tc := range []struct {
		name  string
		edit  func(*BuildInputs)
		want  []string
		label string
	}{
		{"nothing", func(*BuildInputs) {}, nil, ""},
		{"image", func(b *BuildInputs) { b.Image, b.Rootfs = "fedcba9876543210", "r2" },
			[]string{"guest image changed (0123456789ab, now fedcba987654)"}, "image"},
		{"command line", func(b *BuildInputs) { b.Cmdline = "quiet" }, []string{"guest image changed"}, "image"},
		{"kernel", func(b *BuildInputs) { b.Kernel = "k2" }, []string{"kernel changed"}, "kernel"},
		{"accelerator", func(b *BuildInputs) { b.Accel = "kvm" },
			[]string{"machine changed (qemu 7.2.22 pc-i440fx-7.2 tcg, now qemu 7.2.22 pc-i440fx-7.2 kvm)"}, "machine"},
		{"kernel and vmm", func(b *BuildInputs) { b.Kernel, b.VMM = "k2", "qemu 8.2.0" },
			[]string{"kernel changed; machine changed (qemu 7.2.22"}, "kernel"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := was
			tc.edit(&now)
			why := staleReasons(was, now)
			if (why == "") != (tc.want == nil) {
				t.Fatalf("reasons %q, want %q", why, tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(why, w) {
					t.Errorf("reasons %q do not say %q", why, w)
				}
			}
			if why != "" && staleReasonLabel(why) != tc.label {
				t.Errorf("label of %q: %q, want %q", why, staleReasonLabel(why), tc.label)
			}
		})
	}
	if got := staleReasonLabel("function code changed"); got != "other" {
		t.Errorf("label of an unknown reason: %q", got)
	}
}

// Stale notes and the rebuild slot.
func TestStaleAndRebuildSlot(t *testing.T) {
	h := newHarness(t, 0)
	h.m.markStale("app", 2, "image changed")
	if got := h.m.StaleNote("app", 2); got != "image changed" || h.m.StaleNote("app", 1) != "" || h.m.StaleNote("app", 0) != "" {
		t.Fatalf("stale notes: %q", got)
	}
	h.m.ClearStale("app", 1, 2)
	if got := h.m.StaleNote("app", 2); got != "" {
		t.Fatalf("a cleared note: %q", got)
	}
	release, err := h.m.acquireRebuild(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := h.m.acquireRebuild(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("a second rebuild while one runs: %v", err)
	}
	release()
	if release, err = h.m.acquireRebuild(context.Background()); err != nil {
		t.Fatalf("the slot after release: %v", err)
	}
	release()
}

// staleSetup deploys a:1 (live), a:2 (not promoted) and b:1 (live) on
// image-1, then moves the daemon to image-2 and deploys c:1 on it.
func staleSetup(t *testing.T) (*harness, map[string]*wire.Deploy) {
	h := newHarness(t, 0)
	ctx := context.Background()
	deps := map[string]*wire.Deploy{}
	deps["a:1"], _ = h.deploy("a", "a-1")
	req := h.request(&code{h: h, name: "a", digest: "a-2"})
	req.NoPromote = true
	res, err := h.m.Deploy(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	deps["a:2"] = res
	deps["b:1"], _ = h.deploy("b", "b-1")
	h.inputs = BuildInputs{Image: "image-2", VMM: "fake 1"}
	deps["c:1"], _ = h.deploy("c", "c-1")
	h.rebuilding = true
	return h, deps
}

// CheckVersions rebuilds each version built from other inputs than the
// daemon's, aliased ones first, newest first, as rebuild operations: each
// gets new snapshots and the daemon's inputs, and loses its older
// snapshots and its note; a version built from the current inputs is left
// alone.
func TestCheckVersionsRebuildsStale(t *testing.T) {
	h, deployed := staleSetup(t)
	ctx := context.Background()
	if err := h.m.CheckVersions(ctx); err != nil {
		t.Fatal(err)
	}
	want := []string{"rebuild b:1", "rebuild a:1", "rebuild a:2"}
	if !slices.Equal(h.ops, want) || !slices.Equal(h.rebuilt, []int{1, 1, 2}) {
		t.Fatalf("operations %v (rebuilt %v), want %v", h.ops, h.rebuilt, want)
	}
	if !slices.Equal(h.rebuilds, []string{"image ok", "image ok", "image ok"}) {
		t.Fatalf("rebuild metrics %v", h.rebuilds)
	}
	now, _ := json.Marshal(h.inputs)
	for i, key := range []string{"b:1", "a:1", "a:2"} {
		res := h.opResults[i]
		if h.opErrs[i] != nil || res == nil || res.Deploy == nil {
			t.Fatalf("rebuild of %s: %v %+v", key, h.opErrs[i], res)
		}
		d := res.Deploy
		v, err := h.db.GetVersion(ctx, d.Function, d.Version)
		if err != nil || key != versionKey(d.Function, d.Version) || string(v.Inputs) != string(now) {
			t.Fatalf("rebuilt %s:%d for %s: inputs %s, %v", d.Function, d.Version, key, v.Inputs, err)
		}
		if len(d.Snapshots) != 1 || d.Digest != deployed[key].Digest || d.Timing.BootMS != 42 || h.m.StaleNote(d.Function, d.Version) != "" {
			t.Fatalf("rebuild of %s: %+v, note %q", key, d, h.m.StaleNote(d.Function, d.Version))
		}
		if sn, err := h.db.GetSnapshot(ctx, d.Snapshots[0]); err != nil || sn.Version != d.Version {
			t.Fatalf("the new snapshot of %s: %+v %v", key, sn, err)
		}
		if _, err := h.db.GetSnapshot(ctx, deployed[key].Snapshots[0]); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the older snapshot of %s stays: %v", key, err)
		}
	}
	if sn, err := h.db.GetSnapshot(ctx, deployed["c:1"].Snapshots[0]); err != nil || sn.Version != 1 {
		t.Fatalf("c:1, built from the current inputs, lost its snapshot: %v", err)
	}
	ops := len(h.ops)
	if err := h.m.CheckVersions(ctx); err != nil || len(h.ops) != ops {
		t.Fatalf("a second check started %v (%v)", h.ops[ops:], err)
	}
}

// A rebuild that fails is recorded (its operation's error, the metric)
// and leaves the version stale, its older snapshot in place and its
// inputs as they were.
func TestRebuildFailure(t *testing.T) {
	h, deployed := staleSetup(t)
	ctx := context.Background()
	boom := errors.New("boom")
	h.bootErr = boom
	if err := h.m.CheckVersions(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.ops) != 3 || !slices.Equal(h.rebuilds, []string{"image failed", "image failed", "image failed"}) {
		t.Fatalf("operations %v, metrics %v", h.ops, h.rebuilds)
	}
	for i, err := range h.opErrs {
		if !errors.Is(err, boom) || h.opResults[i] != nil {
			t.Fatalf("operation %s: %v %+v", h.ops[i], err, h.opResults[i])
		}
	}
	v, _ := h.db.GetVersion(ctx, "a", 1)
	if note := h.m.StaleNote("a", 1); !strings.HasPrefix(note, "guest image changed (image-1, now image-2)") {
		t.Fatalf("a failed rebuild's note: %q", note)
	}
	if strings.Contains(string(v.Inputs), "image-2") {
		t.Fatalf("a failed rebuild changed the inputs: %s", v.Inputs)
	}
	if _, err := h.db.GetSnapshot(ctx, deployed["a:1"].Snapshots[0]); err != nil {
		t.Fatalf("a failed rebuild lost the older snapshot: %v", err)
	}
}

// A rebuild that cannot start leaves its version stale; the others start.
func TestRebuildNotStarted(t *testing.T) {
	h, _ := staleSetup(t)
	h.startErr = errors.New("shutting down")
	if err := h.m.CheckVersions(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(h.ops) != 0 || h.m.StaleNote("b", 1) == "" || h.m.StaleNote("a", 2) == "" || h.m.StaleNote("c", 1) != "" {
		t.Fatalf("operations %v; notes b:1 %q a:2 %q c:1 %q", h.ops, h.m.StaleNote("b", 1), h.m.StaleNote("a", 2), h.m.StaleNote("c", 1))
	}
}

// A version deployed prepared is prepared again, with its recorded record
// input (none when it was deployed without one), and gets clean and warm
// snapshots.
func TestRebuildPrepared(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		record json.RawMessage
	}{{"rec", json.RawMessage(`{"n":1}`)}, {"norec", nil}} {
		req := h.request(&code{h: h, name: tc.name, digest: tc.name})
		req.Prepare, req.RecordEvent = true, tc.record
		if _, err := h.m.Deploy(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	h.inputs.Kernel = "kernel-2"
	h.rebuilding, h.records = true, nil
	if err := h.m.CheckVersions(ctx); err != nil {
		t.Fatal(err)
	}
	if len(h.opResults) != 2 || !slices.Equal(h.rebuilt, []int{1, 1}) || !slices.Equal(h.rebuilds, []string{"kernel ok", "kernel ok"}) {
		t.Fatalf("operations %v, rebuilt %v, metrics %v", h.ops, h.rebuilt, h.rebuilds)
	}
	for i, res := range h.opResults {
		if h.opErrs[i] != nil || len(res.Deploy.Snapshots) != 2 || res.Deploy.Timing.PrepareMS <= 0 {
			t.Fatalf("prepared rebuild %s: %v %+v", h.ops[i], h.opErrs[i], res)
		}
		want := json.RawMessage(nil)
		if res.Deploy.Function == "rec" {
			want = json.RawMessage(`{"n":1}`)
		}
		if string(h.records[i]) != string(want) {
			t.Fatalf("%s prepared again with %s, want %s", res.Deploy.Function, h.records[i], want)
		}
	}
}

// A version collected, or deleted, while its rebuild waited is not
// rebuilt.
func TestRebuildCollected(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	h.deploy("app", "app-1")
	v, err := h.db.GetVersion(ctx, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	h.rebuilding = true
	if err := h.db.SetVersionCollected(ctx, "app", 1, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.rebuild(ctx, v); !errors.Is(err, errdefs.ErrConflict) || len(h.rebuilt) != 0 {
		t.Fatalf("rebuild of a collected version: %v, rebuilt %v", err, h.rebuilt)
	}
	gone := *v
	gone.Function = "gone"
	if _, err := h.m.rebuild(ctx, &gone); !errors.Is(err, errdefs.ErrNotFound) || len(h.rebuilt) != 0 {
		t.Fatalf("rebuild of a deleted function's version: %v, rebuilt %v", err, h.rebuilt)
	}
	if !slices.Equal(h.rebuilds, []string{"other failed", "other failed"}) {
		t.Fatalf("rebuild metrics %v", h.rebuilds)
	}
}
