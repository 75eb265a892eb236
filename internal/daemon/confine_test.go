package daemon

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// Every VMM the daemon starts (a boot, a restore, the VMM pool's standby
// VMs, prepare's record runs) is to start in an empty network namespace of
// its own: the backend is asked for one in every spec.
func TestEveryVMMInAnEmptyNetworkNamespace(t *testing.T) {
	ran, strategies := testStrategies(nil)
	s, b := fakeService(t, func(c *Config) { c.Strategies, c.KeepAlive = strategies, -1 })
	ctx := context.Background()
	createFn(t, s, "echo")
	res, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`{"x":1}`), GroupSize: 64})
	if err != nil {
		t.Fatalf("prepare: %v (steps %q)", err, *ran)
	}
	if _, err := s.InvokeCold(ctx, ColdRequest{Snapshot: res.Warm.ID, Strategy: "vanilla", InvokeRequest: InvokeRequest{Event: json.RawMessage(`1`)}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "a standby vm", func() bool {
		v := standbyOf(t, s, res.Warm.ID)
		return v != nil && v.State == catalog.StateStandby
	})
	specs := b.Specs()
	if len(specs) < 4 { // the boot, a record run, the cold start, the standby
		t.Fatalf("%d vmms started, want at least 4", len(specs))
	}
	for _, sp := range specs {
		if !sp.EmptyNetNS || sp.User == nil {
			t.Errorf("vmm %s started without an empty network namespace (%v) or a user of its own (%v)", sp.ID, sp.EmptyNetNS, sp.User)
		}
	}
}
