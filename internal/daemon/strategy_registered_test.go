package daemon

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/thaw-dev/thaw/internal/restore/restoretest/nothing"
)

// A strategy registered from outside package restore (a test-only one)
// restores a function's cold start on the fake VMM like a built-in one:
// the function names it, the daemon offers and describes it, and its stats
// come back under its kind.
func TestRegisteredStrategyColdStart(t *testing.T) {
	if err := nothing.Register(); err != nil {
		t.Fatal(err)
	}
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	bootAndSnapshotSpec(t, s, FunctionSpec{Name: "echo", Strategy: string(nothing.Kind)})
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"x":1}`)}})
	if err != nil || !inv.OK {
		t.Fatalf("cold start: %v %+v", err, inv)
	}
	if inv.Strategy != string(nothing.Kind) || inv.StrategyStats == nil || inv.StrategyStats.Kind != string(nothing.Kind) {
		t.Fatalf("ran %s, stats %+v", inv.Strategy, inv.StrategyStats)
	}
	var st nothing.Stats
	if !inv.StrategyStats.PartAs(string(nothing.Kind), &st) || st.MappedBytes <= 0 {
		t.Fatalf("its part: %s", inv.StrategyStats.Part)
	}
	b, err := json.Marshal(inv.StrategyStats)
	if err != nil {
		t.Fatal(err)
	}
	var wire map[string]json.RawMessage
	if err := json.Unmarshal(b, &wire); err != nil || wire["nothing"] == nil || string(wire["kind"]) != `"nothing"` {
		t.Fatalf("on the wire: %s", b)
	}
	found := false
	for _, d := range s.Info().StrategyDetails {
		found = found || d.Kind == string(nothing.Kind) && len(d.Stats) == 1
	}
	if !found {
		t.Fatalf("info does not describe it: %+v", s.Info().StrategyDetails)
	}
}
