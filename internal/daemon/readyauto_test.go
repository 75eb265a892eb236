package daemon

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// readyOfStrategy is the ready clone restored with strategy, if there is one.
func (c *catalogFake) readyOfStrategy(t *testing.T, strategy string) *catalog.VM {
	t.Helper()
	for _, v := range c.readyVMs(t) {
		if v.Strategy == strategy {
			return v
		}
	}
	return nil
}

// localEvidence is the adaptive restore's local location of fn's version 0.
func localEvidence(t *testing.T, s *Service, fn string) wire.RestoreLocation {
	t.Helper()
	doc, err := s.FunctionRestore(context.Background(), fn)
	if err != nil || len(doc.Versions) != 1 || len(doc.Versions[0].Locations) != 1 {
		t.Fatalf("restore document %+v: %v", doc, err)
	}
	return doc.Versions[0].Locations[0]
}

// Under auto a request takes a ready clone of any strategy of its
// snapshot: a hit restores nothing, so the policy neither decides nor
// learns from it (no cold start counted, no sample, no choice metric).
// Fills restore with the policy's current choice, read, not decided.
func TestReadyClonesUnderAuto(t *testing.T) {
	s, c := autoReadyService(t)
	first := invokeFn(t, s, "echo", `{"op":"served"}`)
	if first.Mode != "cold" || first.Strategy != "reap" || first.StrategyChoice == nil || first.Timing.Ready == nil || first.Timing.Ready.Fallback != "none ready" {
		t.Fatalf("first invocation: mode %s strategy %s choice %+v ready %+v", first.Mode, first.Strategy, first.StrategyChoice, first.Timing.Ready)
	}
	waitFor(t, 5*time.Second, "a ready clone restored with the rule's choice", func() bool { return c.readyOfStrategy(t, "reap") != nil })
	before := localEvidence(t, s, "echo")
	choicesBefore := grepLines(promText(t, s), "thaw_restore_choices_total{")
	// The policy now prefers snapbpf: the reap clone still serves.
	setLocalChoice(t, s, "echo", "snapbpf")
	hit := invokeFn(t, s, "echo", `{"op":"served"}`)
	if hit.Mode != "ready" || hit.Strategy != "reap" || hit.Timing.Ready == nil || !hit.Timing.Ready.Hit || hit.Timing.Restore != nil || hit.StrategyChoice != nil {
		t.Fatalf("request under auto with a reap clone ready: mode %s strategy %s ready %+v choice %+v", hit.Mode, hit.Strategy, hit.Timing.Ready, hit.StrategyChoice)
	}
	after := localEvidence(t, s, "echo")
	if after.ColdStarts != before.ColdStarts || after.Explorations != before.Explorations || len(after.Evidence) != len(before.Evidence) ||
		after.Evidence[0].Samples != before.Evidence[0].Samples {
		t.Fatalf("a ready hit changed the adaptive evidence: before %+v, after %+v", before, after)
	}
	if got := grepLines(promText(t, s), "thaw_restore_choices_total{"); got != choicesBefore {
		t.Fatalf("a ready hit counted a strategy choice: before\n%s\nafter\n%s", choicesBefore, got)
	}
	// Its refill restores with the policy's current choice, and serves.
	waitFor(t, 5*time.Second, "a ready clone restored with the current choice", func() bool { return c.readyOfStrategy(t, "snapbpf") != nil })
	next := invokeFn(t, s, "echo", `{"op":"served"}`)
	if next.Mode != "ready" || next.Strategy != "snapbpf" || string(next.Result) != "0" {
		t.Fatalf("next request: mode %s strategy %s result %s", next.Mode, next.Strategy, next.Result)
	}
	var keys []string
	for _, k := range s.ready.DemandKeys() {
		keys = append(keys, k.Snapshot+"/"+string(k.Kind))
	}
	if len(keys) != 1 || !strings.HasSuffix(keys[0], "/auto") {
		t.Fatalf("demand keys %v, want the snapshot's auto key only", keys)
	}
	if got := localEvidence(t, s, "echo"); got.ColdStarts != before.ColdStarts {
		t.Fatalf("ready hits counted as cold starts: %d, want %d", got.ColdStarts, before.ColdStarts)
	}
}

// A request under auto also takes a clone kept for the snapshot under a
// fixed strategy (the function was fixed when it was filled), and a
// function with a fixed strategy keeps its own key.
func TestReadyClonesAutoTakesAnyStrategy(t *testing.T) {
	s, c := autoReadyService(t)
	ctx := context.Background()
	fixed := "snapbpf"
	if _, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &fixed}); err != nil {
		t.Fatal(err)
	}
	if inv := invokeFn(t, s, "echo", `{"op":"served"}`); inv.Mode != "cold" || inv.Strategy != "snapbpf" {
		t.Fatalf("fixed: mode %s strategy %s", inv.Mode, inv.Strategy)
	}
	waitFor(t, 5*time.Second, "a ready clone of the fixed strategy", func() bool { return c.readyOfStrategy(t, "snapbpf") != nil })
	auto := wire.StrategyAuto
	if _, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &auto}); err != nil {
		t.Fatal(err)
	}
	inv := invokeFn(t, s, "echo", `{"op":"served"}`)
	if inv.Mode != "ready" || inv.Strategy != "snapbpf" || !inv.Timing.Ready.Hit {
		t.Fatalf("auto with a snapbpf clone kept under the fixed key: mode %s strategy %s ready %+v", inv.Mode, inv.Strategy, inv.Timing.Ready)
	}
	if n := localEvidence(t, s, "echo").ColdStarts; n != 0 {
		t.Fatalf("the hit counted %d cold starts under auto", n)
	}
}

// After a request on a ready clone ends, no fill starts for Settle (its
// answer is written first); then the refill comes.
func TestReadyCloneRefillSettles(t *testing.T) {
	const settle = 400 * time.Millisecond
	s, c := readyService(t, func(cfg *Config) { cfg.Ready.Settle = settle })
	booted, _ := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(context.Background(), booted.ID)
	invokeFn(t, s, "echo", `{"op":"served"}`)
	waitFor(t, 5*time.Second, "a ready clone", func() bool { return s.ready.Count() == 1 })
	starts := len(c.b.Specs())
	hit := invokeFn(t, s, "echo", `{"op":"served"}`)
	ended := time.Now()
	if hit.Mode != "ready" {
		t.Fatalf("mode %s with a ready clone waiting", hit.Mode)
	}
	for time.Since(ended) < settle*3/4 {
		if n := len(c.b.Specs()); n != starts || s.ready.Filling() != 0 {
			t.Fatalf("a fill started %s after the hit ended, within the settle time %s", time.Since(ended), settle)
		}
		time.Sleep(10 * time.Millisecond)
	}
	waitFor(t, 5*time.Second, "the refill", func() bool { return s.ready.Count() == 1 })
}

// autoReadyService is a daemon with ready clones whose function echo runs
// under auto, choosing between reap and snapbpf (vanilla is not
// automatic), with a snapshot holding both strategies' artifacts.
func autoReadyService(t *testing.T) (*Service, *catalogFake) {
	t.Helper()
	w := &genWorld{}
	vanilla, _ := restore.Lookup(restore.Vanilla)
	vanilla.Auto = false
	s, c := readyService(t, func(cfg *Config) {
		cfg.Strategies = []restore.Strategy{vanilla, w.strategy(restore.REAP), w.strategy(restore.SnapBPF)}
		cfg.Adaptive.DefaultStrategy = wire.StrategyAuto
		cfg.Adaptive.PrepareAfter = -1
	})
	booted, sn := bootAndSnapshot(t, s, "echo")
	s.DeleteVM(context.Background(), booted.ID)
	for _, k := range []restore.Kind{restore.REAP, restore.SnapBPF} {
		if err := writeGen(filepath.Join(sn.Dir, "strategies", string(k)), 1); err != nil {
			t.Fatal(err)
		}
	}
	return s, c
}
