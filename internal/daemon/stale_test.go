package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/thaw-dev/thaw/wire"
)

// A version built on another VMM than the daemon's is stale: the check
// rebuilds it as an operation (booted and snapshotted again on the fake
// VMM), which records the daemon's build inputs and replaces its snapshot;
// its cold starts are then plain ones.
func TestStaleVersionRebuilt(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	dep := deployEcho(t, s, "echo")
	s.vmmVersion = "2.0" // the daemon now runs another VMM version
	if err := s.checkVersions(ctx); err != nil {
		t.Fatal(err)
	}
	ops, _ := s.ListOperations(ctx)
	var rebuild *Operation
	for _, op := range ops {
		if op.Kind == wire.OpRebuild && op.Target == "echo:1" {
			rebuild = op
		}
	}
	if rebuild == nil {
		t.Fatalf("no rebuild operation among %d operations", len(ops))
	}
	op, err := endedOperation(t, s, rebuild.ID)
	if err != nil || op.State != wire.OpSucceeded || op.Result == nil || op.Result.Deploy == nil {
		t.Fatalf("rebuild: %v %+v", err, op)
	}
	res := op.Result.Deploy
	if res.Function != "echo" || res.Version != dep.Version || res.Digest != dep.Digest || len(res.Snapshots) != 1 || res.Snapshots[0] == dep.Snapshots[0] {
		t.Fatalf("rebuild result %+v, deploy %+v", res, dep)
	}
	if _, err := s.db.GetSnapshot(ctx, dep.Snapshots[0]); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the older snapshot stays: %v", err)
	}
	v, err := s.GetVersion(ctx, "echo", dep.Version)
	if err != nil {
		t.Fatal(err)
	}
	var inputs buildInputs
	if err := json.Unmarshal(v.Inputs, &inputs); err != nil || inputs != s.buildInputs(nil) || s.staleNote("echo", v.Number) != "" {
		t.Fatalf("rebuilt version's inputs %s (%v), note %q", v.Inputs, err, s.staleNote("echo", v.Number))
	}
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"a":1}`)}})
	if err != nil || !inv.OK || inv.Timing.Build != nil {
		t.Fatalf("cold start of the rebuilt version: %v %+v", err, inv)
	}
}
