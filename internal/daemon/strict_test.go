package daemon

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A strategy that cannot restore runs as vanilla and says so, unless the
// invocation is strict: then it fails with a conflict naming the strategy,
// the snapshot and why, and no VM runs. A standby VM whose strategy fell
// back does not serve a strict restore.
func TestStrictInvocation(t *testing.T) {
	s, b := fakeService(t, func(c *Config) { c.KeepAlive, c.VMMPoolTTL = -1, time.Minute })
	ctx := context.Background()
	_, sn := bootAndSnapshot(t, s, "echo")
	inv, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", Strategy: "premap"})
	if err != nil {
		t.Fatal(err)
	}
	if inv.Strategy != "vanilla" || inv.StrategyStats == nil || !strings.Contains(inv.StrategyStats.Fallback, "premap") {
		t.Fatalf("premap of an unstored snapshot: ran %s, stats %+v; want vanilla with a fallback", inv.Strategy, inv.StrategyStats)
	}
	// The restore refilled the VMM pool for (snapshot, premap) with a VM
	// whose session fell back too.
	waitFor(t, 5*time.Second, "a standby vm", func() bool { return standbyOf(t, s, sn.ID) != nil })
	starts := len(b.Specs())
	_, err = s.InvokeCold(ctx, ColdRequest{Function: "echo", Strategy: "premap", Strict: true})
	if !errors.Is(err, ErrConflict) {
		t.Fatalf("strict premap of an unstored snapshot: %v, want a conflict", err)
	}
	for _, want := range []string{"strict", "premap cannot restore " + sn.ID, "would fall back to vanilla", "thaw snapshot store " + sn.ID} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("strict error %q lacks %q", err, want)
		}
	}
	if n := len(b.Specs()) - starts; n != 0 {
		t.Errorf("a refused strict restore started %d VMMs", n)
	}
	if sb := standbyOf(t, s, sn.ID); sb != nil {
		t.Errorf("the standby vm that fell back is still there: %+v", sb)
	}
	if recs, _ := s.ListInvocations(ctx, "echo", 10, time.Time{}, ""); len(recs) != 1 {
		t.Errorf("history has %d records, want only the fallen-back one (a refusal never reached a guest)", len(recs))
	}
	// A strategy that can restore is unaffected by strict.
	inv, err = s.InvokeCold(ctx, ColdRequest{Function: "echo", Strategy: "vanilla", Strict: true})
	if err != nil || !inv.OK || inv.Strategy != "vanilla" {
		t.Fatalf("strict vanilla: %v %+v", err, inv)
	}
}
