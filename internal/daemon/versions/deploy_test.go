package versions

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/errdefs"
	ver "github.com/thaw-dev/thaw/internal/versions"
)

// A deploy boots the built configuration, snapshots it, publishes the
// version with its snapshot and moves live to it; the staged code is
// discarded, the layer released and the VM deleted.
func TestDeployPublishesAndPromotes(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	r1, c1 := h.deploy("app", "code-1")
	r2, c2 := h.deploy("app", "code-2")
	if r1.Version != 1 || r2.Version != 2 || !r2.Promoted || r2.Unchanged || len(r2.Snapshots) != 1 {
		t.Fatalf("deploys: %+v %+v", r1, r2)
	}
	if r2.Timing.BootMS != 42 || r2.Timing.TotalMS <= 0 || r2.Digest != Digest(h.booted[1], h.inputs) {
		t.Fatalf("deploy 2's timing or digest: %+v", r2)
	}
	for _, c := range []*code{c1, c2} {
		if c.discards != 1 || c.held || c.released != 1 {
			t.Fatalf("staged code: discarded %d, layer held %v, released %d", c.discards, c.held, c.released)
		}
	}
	if len(h.deletedVMs) != 2 || len(h.pushed) != 0 || !slices.Equal(h.outcomes, []string{"published", "published"}) {
		t.Fatalf("vms deleted %v, pushed %v, outcomes %v", h.deletedVMs, h.pushed, h.outcomes)
	}
	sn, err := h.db.GetSnapshot(ctx, r2.Snapshots[0])
	if err != nil || sn.Version != 2 {
		t.Fatalf("the deploy's snapshot: %v %+v", err, sn)
	}
	if fn, err := h.m.SnapshotFunction(ctx, sn); err != nil || fn.Digest != "code-2" {
		t.Fatalf("the snapshot restores with %+v (%v), want version 2's configuration", fn, err)
	}
	if tg, err := h.m.Resolve(ctx, ver.Ref{Function: "app"}); err != nil || tg != (Target{Version: 2, Alias: ver.Live}) {
		t.Fatalf("app resolves to %+v (%v)", tg, err)
	}
	// The code the function pointed to before stays: version 1 uses it.
	if !exists(c1.dir) || !exists(c2.dir) {
		t.Fatal("a version's code was removed")
	}
	if used, _ := h.m.CodeDirsInUse(ctx); !used[c1.dir] || !used[c2.dir] {
		t.Fatalf("code in use: %v", used)
	}
}

// A deploy of the content of an existing version returns it and changes
// nothing; its freshly built code goes.
func TestDeploySameContentIsUnchanged(t *testing.T) {
	h := newHarness(t, 0)
	r1, _ := h.deploy("app", "code-1")
	r2, c2 := h.deploy("app", "code-1")
	if !r2.Unchanged || r2.Version != r1.Version || r2.Digest != r1.Digest || len(r2.Snapshots) != 0 {
		t.Fatalf("the same content again: %+v", r2)
	}
	if len(h.booted) != 1 || exists(c2.dir) || !slices.Equal(h.outcomes, []string{"published", "unchanged"}) {
		t.Fatalf("booted %d, second build's code left %v, outcomes %v", len(h.booted), exists(c2.dir), h.outcomes)
	}
	// Other build inputs (a new guest image) make other content.
	h.inputs.Image = "image-2"
	if r3, _ := h.deploy("app", "code-1"); r3.Unchanged || r3.Version != 2 {
		t.Fatalf("the same code on another image: %+v", r3)
	}
}

// A deploy that fails leaves no version, no snapshot and no code behind.
func TestDeployFailureLeavesNothing(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	boom := errors.New("boom")
	h.bootErr = boom
	c := &code{h: h, name: "app", digest: "code-1"}
	if _, err := h.m.Deploy(ctx, h.request(c)); !errors.Is(err, boom) {
		t.Fatalf("a failed boot: %v", err)
	}
	if exists(c.dir) || c.discards != 1 || c.held || len(h.spanErrs) != 1 || !errors.Is(h.spanErrs[0], boom) {
		t.Fatalf("after a failed boot: code %v, discards %d, layer held %v, span errors %v", exists(c.dir), c.discards, c.held, h.spanErrs)
	}
	h.bootErr, h.publishErr = nil, boom
	c = &code{h: h, name: "app", digest: "code-1"}
	if _, err := h.m.Deploy(ctx, h.request(c)); !errors.Is(err, boom) {
		t.Fatalf("a failed publish: %v", err)
	}
	snaps, _ := h.db.ListSnapshots(ctx, "")
	if len(snaps) != 0 || len(h.deleted) != 1 || exists(c.dir) || len(h.m.pending) != 0 {
		t.Fatalf("after a failed publish: snapshots %d, deleted %v, code %v, pending %v", len(snaps), h.deleted, exists(c.dir), h.m.pending)
	}
	if _, err := h.db.GetFunction(ctx, "app"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("the function after failed deploys: %v", err)
	}
	if vs, _ := h.db.ListVersions(ctx, "app"); len(vs) != 0 || !slices.Equal(h.outcomes, []string{"failed", "failed"}) {
		t.Fatalf("versions %d, outcomes %v", len(vs), h.outcomes)
	}
	h.publishErr = nil
	c = &code{h: h, name: "app", buildErr: boom}
	if _, err := h.m.Deploy(ctx, h.request(c)); !errors.Is(err, boom) || c.discards != 1 || len(h.booted) != 1 {
		t.Fatalf("a failed build: %v, discards %d, boots %d", err, c.discards, len(h.booted))
	}
}

// A deploy's request is checked before its code is staged.
func TestDeployChecksItsRequest(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	staged := 0
	req := func(name string, prepare bool, event string) DeployRequest {
		r := DeployRequest{Name: name, Prepare: prepare, Stage: func(context.Context, *catalog.Function) (Code, error) {
			staged++
			return &code{h: h, name: name}, nil
		}}
		if event != "" {
			r.RecordEvent = json.RawMessage(event)
		}
		return r
	}
	if _, err := h.m.BeginDeploy(ctx, req("Bad_Name", false, "")); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a bad name: %v", err)
	}
	if _, err := h.m.BeginDeploy(ctx, req("app", false, `{"a":1}`)); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("a record event without prepare: %v", err)
	}
	h.prepareErr = errdefs.ErrConflict
	if _, err := h.m.BeginDeploy(ctx, req("app", true, "")); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("a prepare the daemon cannot do: %v", err)
	}
	if staged != 0 {
		t.Fatalf("refused requests staged code %d times", staged)
	}
	h.prepareErr = nil
	d, err := h.m.BeginDeploy(ctx, req("app", true, ""))
	if err != nil || staged != 1 {
		t.Fatalf("a good request: %v, staged %d", err, staged)
	}
	d.Discard()
	if c := d.code.(*code); c.discards != 1 {
		t.Fatalf("a discarded deploy's code: discards %d", c.discards)
	}
}

// A deploy with prepare publishes the clean and the warm snapshot, pushes
// the warm one, and records its record event (null if none).
func TestDeployPrepare(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	c := &code{h: h, name: "app", digest: "code-1"}
	req := h.request(c)
	req.Prepare, req.NoPromote = true, true
	res, err := h.m.Deploy(ctx, req)
	if err != nil || len(res.Snapshots) != 2 || res.Promoted || res.Timing.PrepareMS <= 0 || res.Timing.SnapshotMS != 5 {
		t.Fatalf("deploy with prepare: %v %+v", err, res)
	}
	if !slices.Equal(h.pushed, res.Snapshots[1:]) {
		t.Fatalf("pushed %v, want the warm snapshot %s", h.pushed, res.Snapshots[1])
	}
	v, err := h.db.GetVersion(ctx, "app", 1)
	if err != nil || string(v.RecordEvent) != "null" {
		t.Fatalf("the version's record event: %v %q", err, v.RecordEvent)
	}
	if _, err := h.db.GetAlias(ctx, "app", ver.Live); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("live after a deploy that does not promote: %v", err)
	}
	var inputs BuildInputs
	if err := json.Unmarshal(v.Inputs, &inputs); err != nil || inputs != h.inputs {
		t.Fatalf("the version's build inputs: %v %+v", err, inputs)
	}
}

// Deploys of one function run one at a time, in the order asked.
func TestDeploysOfOneFunctionQueue(t *testing.T) {
	h := newHarness(t, 0)
	ctx := context.Background()
	first := &code{h: h, name: "app", digest: "code-1", gate: make(chan struct{}), started: make(chan struct{})}
	second := &code{h: h, name: "app", digest: "code-2", started: make(chan struct{})}
	other := &code{h: h, name: "other", digest: "code-3"}
	results := make(chan int, 2)
	go func() {
		res, err := h.m.Deploy(ctx, h.request(first))
		if err != nil {
			t.Error(err)
		}
		results <- res.Version
	}()
	<-first.started
	go func() {
		res, err := h.m.Deploy(ctx, h.request(second))
		if err != nil {
			t.Error(err)
		}
		results <- res.Version
	}()
	if _, err := h.m.Deploy(ctx, h.request(other)); err != nil { // another function does not wait
		t.Fatal(err)
	}
	select {
	case <-second.started:
		t.Fatal("the second deploy built while the first ran")
	case <-time.After(100 * time.Millisecond):
	}
	close(first.gate)
	if a, b := <-results, <-results; a != 1 || b != 2 {
		t.Fatalf("versions published in order %d, %d", a, b)
	}
}
