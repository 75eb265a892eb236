package policy

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

// world serves cold starts whose totals depend on the strategy (a
// lognormal around its mean, sd 5%), as a daemon would measure them.
type world struct {
	mean map[string]float64
	rng  *rand.Rand
}

func (w world) total(s string) float64 {
	return w.mean[s] * math.Exp(0.05*w.rng.NormFloat64())
}

// run decides and observes n cold starts and returns what each chose.
func run(l *Location, w world, arms []string, n int, now *time.Time, queueing bool, rng *rand.Rand) []Decision {
	var out []Decision
	for i := 0; i < n; i++ {
		*now = now.Add(time.Second)
		d := l.Decide(Options{Arms: arms, Rule: "test order", Queueing: queueing, Now: *now, Rand: rng})
		l.Observe(d.Strategy, Sample{At: *now, TotalMS: w.total(d.Strategy)})
		out = append(out, d)
	}
	return out
}

func count(ds []Decision, f func(Decision) bool) int {
	n := 0
	for _, d := range ds {
		if f(d) {
			n++
		}
	}
	return n
}

// The bandit finds the fastest strategy, explores at most 10% of the cold
// starts, and the choice ends on the fastest.
func TestDecideLearnsFastest(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		w := world{mean: map[string]float64{"vanilla": 240, "reap": 190, "faasnap": 160}, rng: rand.New(rand.NewPCG(seed, 9))}
		l := &Location{}
		l.Reset("snap-1")
		now := t0
		ds := run(l, w, []string{"reap", "faasnap", "vanilla"}, 200, &now, false, rng)
		if ds[0].Strategy != "reap" || ds[0].How != HowRule || !strings.Contains(ds[0].Reason, "rule") {
			t.Fatalf("seed %d: first decision %+v, want the rule's first arm", seed, ds[0])
		}
		explored := count(ds, func(d Decision) bool { return d.How == HowExplore })
		if float64(explored) > ExploreShare*float64(len(ds)) || explored != l.Explorations {
			t.Fatalf("seed %d: %d explorations of %d cold starts (counted %d)", seed, explored, len(ds), l.Explorations)
		}
		if l.Choice != "faasnap" {
			t.Fatalf("seed %d: choice %q after 200 cold starts (evidence %+v)", seed, l.Choice, l.Evidence())
		}
		last := ds[150:]
		if n := count(last, func(d Decision) bool { return d.Strategy == "faasnap" }); n < 40 {
			t.Fatalf("seed %d: faasnap chose %d of the last 50", seed, n)
		}
	}
}

// No exploration while admission queues, and never beyond the budget at
// any point of the sequence.
func TestExplorationBounds(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	w := world{mean: map[string]float64{"a": 100, "b": 100, "c": 100}, rng: rand.New(rand.NewPCG(4, 4))}
	l := &Location{}
	now := t0
	ds := run(l, w, []string{"a", "b", "c"}, 100, &now, true, rng)
	if n := count(ds, func(d Decision) bool { return d.How == HowExplore || d.Strategy != "a" }); n != 0 {
		t.Fatalf("%d explorations while queueing", n)
	}
	l2 := &Location{}
	seen := 0
	for i := 1; i <= 300; i++ {
		now = now.Add(time.Second)
		d := l2.Decide(Options{Arms: []string{"a", "b", "c"}, Now: now, Rand: rng})
		l2.Observe(d.Strategy, Sample{At: now, TotalMS: w.total(d.Strategy)})
		if d.How == HowExplore {
			seen++
		}
		if float64(seen) > ExploreShare*float64(i) {
			t.Fatalf("cold start %d: %d explorations", i, seen)
		}
	}
	if seen == 0 {
		t.Fatal("never explored")
	}
	// The first exploration comes at the tenth cold start, to an untried arm.
	l3 := &Location{}
	for i := 1; i <= 10; i++ {
		now = now.Add(time.Second)
		d := l3.Decide(Options{Arms: []string{"a", "b"}, Now: now, Rand: rng})
		if (d.How == HowExplore) != (i == 10) || i == 10 && d.Strategy != "b" {
			t.Fatalf("cold start %d: %+v", i, d)
		}
		l3.Observe(d.Strategy, Sample{At: now, TotalMS: 100})
	}
}

// The choice follows a change of the world (a strategy gets slower), and
// does not flap between two equal strategies.
func TestChoiceFollowsChangeWithoutFlapping(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	w := world{mean: map[string]float64{"reap": 100, "faasnap": 130}, rng: rand.New(rand.NewPCG(6, 6))}
	l := &Location{}
	now := t0
	run(l, w, []string{"reap", "faasnap"}, 60, &now, false, rng)
	if l.Choice != "reap" {
		t.Fatalf("choice %q", l.Choice)
	}
	w.mean["reap"] = 200 // its working set no longer fits
	run(l, w, []string{"reap", "faasnap"}, 60, &now, false, rng)
	if l.Choice != "faasnap" {
		t.Fatalf("choice %q after reap slowed down (evidence %+v)", l.Choice, l.Evidence())
	}
	// Two equal strategies: the choice changes rarely (SwitchMargin).
	eq := world{mean: map[string]float64{"x": 100, "y": 100}, rng: rand.New(rand.NewPCG(8, 8))}
	l2 := &Location{}
	changes, last := 0, ""
	for i := 0; i < 200; i++ {
		now = now.Add(time.Second)
		d := l2.Decide(Options{Arms: []string{"x", "y"}, Now: now, Rand: rng})
		l2.Observe(d.Strategy, Sample{At: now, TotalMS: eq.total(d.Strategy)})
		if l2.Choice != last {
			changes++
			last = l2.Choice
		}
	}
	if changes > 6 {
		t.Fatalf("choice changed %d times between equal strategies", changes)
	}
}

// A refreshed strategy (Forget) that is the current choice is measured
// again before medians compete; a new snapshot (Reset) starts from the
// rule; only available arms are chosen; old samples age out.
func TestForgetResetAvailabilityAge(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	l := &Location{}
	now := t0
	for i := 0; i < 5; i++ {
		l.Observe("reap", Sample{At: now, TotalMS: 300})
		l.Observe("faasnap", Sample{At: now, TotalMS: 200})
	}
	l.Choice = "reap"
	d := l.Decide(Options{Arms: []string{"reap", "faasnap"}, Now: now})
	if d.Strategy != "faasnap" || d.How != HowExploit || !strings.Contains(d.Reason, "faasnap has the lowest median") {
		t.Fatalf("decision %+v", d)
	}
	changed := l.ChangedAt
	l.Forget("faasnap")
	for i := 0; i < MinSamples; i++ {
		d = l.Decide(Options{Arms: []string{"reap", "faasnap"}, Now: now})
		if d.Strategy != "faasnap" || d.How != HowMeasure {
			t.Fatalf("after forget, decision %d: %+v", i, d)
		}
		l.Observe("faasnap", Sample{At: now, TotalMS: 350})
	}
	if !l.ChangedAt.Equal(changed) || l.Choice != "faasnap" {
		t.Fatalf("measuring changed the choice: %q at %v", l.Choice, l.ChangedAt)
	}
	now2 := now.Add(time.Minute)
	if d = l.Decide(Options{Arms: []string{"reap", "faasnap"}, Now: now2}); d.Strategy != "reap" {
		t.Fatalf("measured again at 350 ms against reap's 300: %+v", d)
	}
	if !l.ChangedAt.Equal(now2) || l.Choice != "reap" {
		t.Fatalf("change not recorded: %q at %v", l.Choice, l.ChangedAt)
	}
	// Only available arms.
	if d = l.Decide(Options{Arms: []string{"vanilla"}, Now: now}); d.Strategy != "vanilla" {
		t.Fatalf("unavailable choice kept: %+v", d)
	}
	l.Reset("snap-2")
	if d = l.Decide(Options{Arms: []string{"faasnap", "vanilla"}, Rule: "faasnap where it has artifacts", Now: now, Rand: rng}); d.Strategy != "faasnap" || d.How != HowRule ||
		d.Reason != "rule: faasnap where it has artifacts" {
		t.Fatalf("after reset: %+v", d)
	}
	if len(l.Evidence()) != 0 || l.Snapshot != "snap-2" {
		t.Fatalf("reset kept evidence %+v", l.Evidence())
	}
	l.Observe("faasnap", Sample{At: now, TotalMS: 1})
	later := now.Add(MaxSampleAge + time.Minute)
	l.Decide(Options{Arms: []string{"faasnap"}, Now: later})
	if len(l.Evidence()) != 0 {
		t.Fatalf("old samples kept: %+v", l.Evidence())
	}
	if (Decision{}) != l.Decide(Options{Now: later}) {
		t.Fatal("no arms decided something")
	}
}

// The window keeps Window samples; Evidence gives medians; the state
// survives JSON (the catalog keeps it so).
func TestEvidenceAndPersistence(t *testing.T) {
	l := &Location{}
	for i := 1; i <= Window+5; i++ {
		l.Observe("reap", Sample{At: t0, TotalMS: float64(i), SetupMS: 2 * float64(i), Faults: uint64(i), BytesRead: 4096})
	}
	ev := l.Evidence()
	if len(ev) != 1 || ev[0].Samples != Window || ev[0].MedianTotalMS != 15.5 || ev[0].MedianSetupMS != 31 || ev[0].MedianBytesRead != 4096 {
		t.Fatalf("evidence %+v", ev)
	}
	l.Choice, l.ColdStarts, l.Explorations = "reap", 40, 3
	b, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	var back Location
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Choice != "reap" || back.ColdStarts != 40 || back.Explorations != 3 || back.Evidence()[0] != ev[0] {
		t.Fatalf("round trip: %+v", back)
	}
}

// The drift detector: 5 of the last 10 cold starts over 20% trigger, and
// the window slides.
func TestDriftWindow(t *testing.T) {
	var d DriftWindow
	for i := 0; i < 10; i++ {
		if d.Observe(0.05) {
			t.Fatal("triggered on small ratios")
		}
	}
	trig := -1
	for i := 0; i < 10; i++ {
		if d.Observe(0.5) && trig < 0 {
			trig = i
		}
	}
	if trig != DriftCount-1 {
		t.Fatalf("triggered at drifted cold start %d, want %d", trig+1, DriftCount)
	}
	if len(d.Ratios) != DriftWindowSize || d.Drifted() != 10 {
		t.Fatalf("window %v", d.Ratios)
	}
	// Exactly the threshold does not count.
	var e DriftWindow
	for i := 0; i < 10; i++ {
		if e.Observe(DriftThreshold) {
			t.Fatal("the threshold itself counted as drift")
		}
	}
	// Alternating: 5 of 10.
	var f DriftWindow
	got := false
	for i := 0; i < 10; i++ {
		r := 0.0
		if i%2 == 1 {
			r = 0.3
		}
		got = f.Observe(r)
	}
	if !got {
		t.Fatal("5 of 10 did not trigger")
	}
}

func TestSetUse(t *testing.T) {
	u := SetUse{SetPages: 100, TouchedPages: 60, OutsidePages: 40}
	if r, ok := u.OutsideRatio(); !ok || r != 0.4 || u.UnusedPages() != 40 {
		t.Fatalf("ratio %v %v unused %d", r, ok, u.UnusedPages())
	}
	if _, ok := (SetUse{SetPages: 5}).OutsideRatio(); ok {
		t.Fatal("nothing touched gave a ratio")
	}
	if (SetUse{SetPages: 5, TouchedPages: 9}).UnusedPages() != 0 {
		t.Fatal("unused below zero")
	}
}

// OutsideRatio is the share of the touched pages that lay outside the set;
// ok is false when the guest touched nothing measurable.
func (u SetUse) OutsideRatio() (ratio float64, ok bool) {
	touched := u.TouchedPages + u.OutsidePages
	if touched == 0 {
		return 0, false
	}
	return float64(u.OutsidePages) / float64(touched), true
}

// UnusedPages are the set's pages the guest never touched (prefetched for
// nothing).
func (u SetUse) UnusedPages() uint64 {
	if u.TouchedPages >= u.SetPages {
		return 0
	}
	return u.SetPages - u.TouchedPages
}
