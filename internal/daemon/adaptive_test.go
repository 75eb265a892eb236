package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon/snapshots"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// genWorld is a test strategy's world: its artifacts are a generation
// number written twice, in gen.json and gen.bin (a manifest and its data
// file); Begin reads one, pauses, reads the other, so a swap between them
// would mix two sets, which it counts. Its sessions report that the guest
// touched 60 of the set's 100 pages and outside(gen) pages outside it.
type genWorld struct {
	pause    time.Duration
	begins   atomic.Int32
	mixed    atomic.Int32
	refresh  func(ctx context.Context, h restore.RecordHost, snap restore.Snapshot) error // nil: record on snap
	outside  func(gen int) uint64
	refreshN atomic.Int32
}

func writeGen(dir string, gen int) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range []string{"gen.json", "gen.bin"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(strconv.Itoa(gen)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func readGen(path string) int {
	b, _ := os.ReadFile(path)
	n, _ := strconv.Atoi(string(b))
	return n
}

// strategy is a strategy of kind k backed by vanilla's restore.
func (w *genWorld) strategy(k restore.Kind) restore.Strategy {
	vanilla, _ := restore.Lookup(restore.Vanilla)
	own, _ := restore.Lookup(k) // its place in the adaptive rule
	return restore.Strategy{Kind: k, Auto: true, AutoOrder: own.AutoOrder,
		Ready: func(snap restore.Snapshot, _ restore.Env) bool {
			_, err := os.Stat(filepath.Join(snap.ArtifactDir(k), "gen.json"))
			return err == nil
		},
		Begin: func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
			w.begins.Add(1)
			a := readGen(filepath.Join(snap.ArtifactDir(k), "gen.json"))
			time.Sleep(w.pause)
			if b := readGen(filepath.Join(snap.ArtifactDir(k), "gen.bin")); a != b {
				w.mixed.Add(1)
			}
			sess, err := vanilla.Begin(ctx, snap, env)
			if err != nil {
				return nil, err
			}
			return &genSession{Session: sess, kind: k, gen: a, w: w}, nil
		},
		Record: func(_ context.Context, _ restore.RecordHost, p *restore.Prepare) error {
			return writeGen(p.Warm.ArtifactDir(k), 1)
		},
		Refresh: func(ctx context.Context, h restore.RecordHost, snap restore.Snapshot, dir string, _ restore.RecordOptions) (restore.RefreshBuild, error) {
			w.refreshN.Add(1)
			if w.refresh != nil {
				if err := w.refresh(ctx, h, snap); err != nil {
					return restore.RefreshBuild{}, err
				}
			} else {
				vm, err := h.Restore(ctx, snap, vanilla.Begin)
				if err != nil {
					return restore.RefreshBuild{}, err
				}
				err = vm.Invoke(ctx)
				vm.Close()
				if err != nil {
					return restore.RefreshBuild{}, err
				}
			}
			gen := readGen(filepath.Join(snap.ArtifactDir(k), "gen.json")) + 1
			return restore.RefreshBuild{Pages: uint64(100 + gen)}, writeGen(dir, gen)
		},
	}
}

// genSession reports the set use of its generation.
type genSession struct {
	restore.Session
	kind restore.Kind
	gen  int
	w    *genWorld
}

func (s *genSession) Kind() restore.Kind { return s.kind }

func (s *genSession) MeasureSet(int) (restore.SetUse, error) {
	out := uint64(0)
	if s.w.outside != nil {
		out = s.w.outside(s.gen)
	}
	return restore.SetUse{SetPages: 100, SetTouchedPages: 60, SetOutsidePages: out}, nil
}

// slowed is st with Begin delayed by d (a slower strategy).
func slowed(st restore.Strategy, d time.Duration) restore.Strategy {
	begin := st.Begin
	st.Begin = func(ctx context.Context, snap restore.Snapshot, env restore.Env) (restore.Session, error) {
		time.Sleep(d)
		return begin(ctx, snap, env)
	}
	return st
}

func coldOf(t *testing.T, s *Service, fn, strategy string) *Invocation {
	t.Helper()
	inv, err := s.InvokeCold(context.Background(), ColdRequest{Function: fn, Strategy: strategy, InvokeRequest: InvokeRequest{Event: json.RawMessage(`{"x":2}`)}})
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// Under auto the daemon learns which strategy is faster for a function
// from its own cold starts: it starts with the rule's strategy, explores
// the others in at most a tenth of the cold starts, switches to the
// fastest, shows the evidence and counts choices; a request's strategy
// and a function's fixed one still win.
func TestAdaptiveChoosesFastest(t *testing.T) {
	w := &genWorld{}
	vanilla, _ := restore.Lookup(restore.Vanilla)
	vanilla.Auto = false
	slow := slowed(w.strategy(restore.REAP), 150*time.Millisecond)
	fast := w.strategy(restore.SnapBPF)
	s, _ := fakeService(t, func(c *Config) {
		c.KeepAlive, c.VMMPool = -1, -1
		c.Strategies = []restore.Strategy{vanilla, slow, fast}
		c.Adaptive.DefaultStrategy = wire.StrategyAuto
		c.Adaptive.PrepareAfter = -1
	})
	ctx := context.Background()
	_, sn := bootAndSnapshot(t, s, "echo")
	for _, k := range []restore.Kind{restore.REAP, restore.SnapBPF} {
		if err := writeGen(filepath.Join(sn.Dir, "strategies", string(k)), 1); err != nil {
			t.Fatal(err)
		}
	}
	first := coldOf(t, s, "echo", "")
	if first.Strategy != "reap" || first.StrategyChoice == nil || first.StrategyChoice.How != policy.HowRule ||
		!strings.Contains(first.StrategyChoice.Reason, "rule: locally") {
		t.Fatalf("first cold start %s: %+v", first.Strategy, first.StrategyChoice)
	}
	explored, switched := coldStartsUntilSwitch(t, s)
	doc, err := s.FunctionRestore(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	if doc.Strategy != "auto" || doc.StrategyFrom != "daemon" || len(doc.Versions) != 1 || len(doc.Versions[0].Locations) != 1 {
		t.Fatalf("restore document %+v", doc)
	}
	checkSwitchedLocation(t, doc.Versions[0].Locations[0], sn.ID, switched, explored)
	metrics := promText(t, s)
	for _, want := range []string{`thaw_restore_choices_total{how="explore",location="local",strategy="snapbpf"}`,
		`thaw_restore_choices_total{how="rule",location="local",strategy="reap"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The state survives a restart of the daemon: a new adaptive restore
	// on the same catalog reads it.
	if again, _ := newAdaptive(s, s.cfg.Adaptive).FunctionRestore(ctx, "echo"); again.Versions[0].Locations[0].ColdStarts != switched {
		t.Fatalf("reloaded state %+v", again.Versions[0].Locations[0])
	}
	// A request's strategy wins, then a function's own.
	if inv := coldOf(t, s, "echo", "reap"); inv.Strategy != "reap" || inv.StrategyChoice.How != "request" {
		t.Fatalf("requested: %s %+v", inv.Strategy, inv.StrategyChoice)
	}
	reap := "reap"
	if _, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &reap}); err != nil {
		t.Fatal(err)
	}
	if inv := coldOf(t, s, "echo", ""); inv.Strategy != "reap" || inv.StrategyChoice.How != "function" {
		t.Fatalf("function's: %s %+v", inv.Strategy, inv.StrategyChoice)
	}
	if doc, _ := s.FunctionRestore(ctx, "echo"); doc.Strategy != "reap" || doc.StrategyFrom != "function" {
		t.Fatalf("document after set: %+v", doc)
	}
}

// coldStartsUntilSwitch cold-starts echo on s until the choice switches to
// snapbpf, the faster strategy, checking that at most a tenth of the cold
// starts explore; it returns how many explored and the switching cold
// start's number.
func coldStartsUntilSwitch(t *testing.T, s *Service) (explored, switched int) {
	t.Helper()
	for i := 2; i <= 45 && switched == 0; i++ {
		inv := coldOf(t, s, "echo", "")
		if inv.StrategyChoice.How == policy.HowExplore {
			explored++
		}
		if inv.Strategy == "snapbpf" && inv.StrategyChoice.How == policy.HowExploit {
			switched = i
		}
		if float64(explored) > 0.1*float64(i) {
			t.Fatalf("cold start %d: %d explorations", i, explored)
		}
	}
	if switched == 0 {
		doc, _ := s.FunctionRestore(context.Background(), "echo")
		t.Fatalf("never switched to the faster strategy: %+v", doc)
	}
	return explored, switched
}

// checkSwitchedLocation checks the restore document's location of the local
// snapshot snap after the switch: snapbpf chosen, the counts, and each
// strategy's evidence, reap's set-up the slower.
func checkSwitchedLocation(t *testing.T, loc wire.RestoreLocation, snap string, switched, explored int) {
	t.Helper()
	if loc.Location != "local" || loc.Snapshot != snap || loc.Choice != "snapbpf" || loc.ChangedAt.IsZero() ||
		loc.ColdStarts != switched || loc.Explorations != explored || len(loc.Evidence) != 2 ||
		!strings.Contains(loc.Reason, "snapbpf has the lowest median total") {
		t.Fatalf("location %+v", loc)
	}
	for _, e := range loc.Evidence {
		if e.Samples < policy.MinSamples || e.MedianTotalMS <= 0 || e.MedianSetupMS <= 0 {
			t.Errorf("evidence %+v", e)
		}
	}
	if ev := loc.Evidence; ev[0].Strategy != "reap" || ev[0].MedianSetupMS < ev[1].MedianSetupMS+100 {
		t.Errorf("reap's set-up should be 150 ms slower: %+v", ev)
	}
}

// Bad settings are refused with a clear error and change nothing.
func TestRestoreSettingsRefused(t *testing.T) {
	s, _ := fakeService(t, nil)
	ctx := context.Background()
	createFn(t, s, "echo")
	bad, off := "fastest", "off"
	if _, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &bad, Refresh: &off}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), `strategy "fastest": give auto or one of the strategies`) {
		t.Fatalf("bad strategy: %v", err)
	}
	never := "never"
	if _, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Refresh: &never}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "give prepare, traffic or off") {
		t.Fatalf("bad refresh: %v", err)
	}
	if doc, _ := s.FunctionRestore(ctx, "echo"); doc.Refresh != "off" || doc.RefreshFrom != "daemon" || doc.Strategy != "vanilla" {
		t.Fatalf("settings changed: %+v", doc)
	}
	if _, err := s.CreateFunction(ctx, FunctionSpec{Name: "other", Strategy: "quick"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("create with a bad strategy: %v", err)
	}
	if _, err := s.GetFunction(ctx, "other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("a refused create left a function: %v", err)
	}
	if _, err := s.SetRestoreSettings(ctx, "none", wire.RestoreSettings{}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown function: %v", err)
	}
	// "default" returns a setting to the daemon's.
	auto, def := "auto", SettingDefault
	if doc, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &auto}); err != nil || doc.Strategy != "auto" || doc.StrategyFrom != "function" {
		t.Fatalf("set auto: %+v %v", doc, err)
	}
	if doc, err := s.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &def}); err != nil || doc.StrategyFrom != "daemon" {
		t.Fatalf("back to default: %+v %v", doc, err)
	}
}

// genService is a fake service restoring with vanilla, w's gen strategy as
// reap and FaaSnap's real record step (not auto), keeping no VMs or VMMs
// aside; edit, if set, changes its config further.
func genService(t *testing.T, w *genWorld, edit func(*Config)) *Service {
	t.Helper()
	faasnap, _ := restore.Lookup(restore.FaaSnap)
	faasnap.Auto = false
	vanilla, _ := restore.Lookup(restore.Vanilla)
	s, _ := fakeService(t, func(c *Config) {
		c.KeepAlive, c.VMMPool = -1, -1
		c.Strategies = []restore.Strategy{vanilla, w.strategy(restore.REAP), faasnap}
		if edit != nil {
			edit(c)
		}
	})
	return s
}

// preparedGen prepares echo with the real FaaSnap record step (which takes
// the warm snapshot) and the gen strategy as reap: the warm snapshot has
// generation 1 of reap's artifacts and its record input is kept.
func preparedGen(t *testing.T, w *genWorld, edit func(*Config)) (*Service, *PrepareResult) {
	t.Helper()
	s := genService(t, w, edit)
	ctx := context.Background()
	createSpec(t, s, FunctionSpec{Name: "echo", Strategy: "reap", Refresh: wire.RefreshPrepare})
	res, err := s.Prepare(ctx, PrepareRequest{Function: "echo", RecordEvent: json.RawMessage(`{"x":1}`), GroupSize: 64})
	if err != nil {
		t.Fatal(err)
	}
	return s, res
}

// A set the inputs drifted from is recorded again in the background after
// 5 of 10 cold starts touched more than 20% outside it, swapped in whole,
// and the next cold starts touch under the threshold outside it; the
// function's document and the metrics say so.
func TestDriftRefreshesAndSwaps(t *testing.T) {
	w := &genWorld{outside: func(gen int) uint64 {
		if gen < 2 {
			return 40 // 40 of 100 touched: 40%
		}
		return 2
	}}
	s, res := preparedGen(t, w, nil)
	ctx := context.Background()
	warm := res.Warm
	if ev, err := s.db.PrepareEvent(ctx, warm.ID); err != nil || string(ev) != `{"x":1}` {
		t.Fatalf("record input kept: %q %v", ev, err)
	}
	for i := 1; i <= policy.DriftCount; i++ {
		inv := coldOf(t, s, "echo", "")
		if inv.Snapshot != warm.ID || inv.Strategy != "reap" || inv.StrategyStats.SetOutsideRatio != 0.4 || inv.StrategyStats.SetUnusedPages != 40 {
			t.Fatalf("cold start %d: %s %s %+v", i, inv.Snapshot, inv.Strategy, inv.StrategyStats.SetUseStats)
		}
	}
	r := endedRefresh(t, s, "echo")
	if r.State != wire.OpSucceeded || r.Snapshot != warm.ID || r.Source != "prepare" || len(r.Sets) != 1 || r.Sets[0].PagesAfter != 102 ||
		!strings.Contains(r.Reason, "reap: 5 of the last 5 cold starts touched more than 20% of their pages outside the recorded set (the last 40%)") {
		t.Fatalf("refresh %+v", r)
	}
	op, err := endedOperation(t, s, r.Operation)
	if err != nil || op.Kind != wire.OpRefresh || op.State != wire.OpSucceeded || op.Result.Refresh == nil {
		t.Fatalf("operation %+v %v", op, err)
	}
	if g := readGen(filepath.Join(warm.Dir, "strategies", "reap", "gen.json")); g != 2 {
		t.Fatalf("generation %d in place", g)
	}
	if ents, _ := filepath.Glob(filepath.Join(warm.Dir, snapshots.StagingPrefix+"*")); len(ents) != 0 {
		t.Fatalf("staging left: %v", ents)
	}
	for i := 0; i < 3; i++ {
		if inv := coldOf(t, s, "echo", ""); inv.StrategyStats.SetOutsideRatio >= policy.DriftThreshold {
			t.Fatalf("after the refresh: %+v", inv.StrategyStats.SetUseStats)
		}
	}
	doc, _ := s.FunctionRestore(ctx, "echo")
	if d := doc.Versions[0].Drift; len(d) != 1 || d[0].Drifted != 0 || d[0].ColdStarts != 3 {
		t.Fatalf("drift after the refresh %+v", d)
	}
	if !strings.Contains(promText(t, s), `thaw_workingset_refreshes_total{outcome="ok",source="prepare",strategy="reap"} 1`) {
		t.Error("refresh not counted")
	}
	if w.mixed.Load() != 0 {
		t.Fatalf("%d restores saw mixed artifacts", w.mixed.Load())
	}
}

// Restores running while sets are swapped again and again each use one
// whole set: the swap waits for restores between Begin and Started, and
// restores that begin after it see the new set.
func TestSwapNeverMixesASet(t *testing.T) {
	w := &genWorld{pause: 5 * time.Millisecond}
	s, res := preparedGen(t, w, func(c *Config) { c.MaxVMs = 8 })
	dir := res.Warm.Dir
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := s.InvokeCold(context.Background(), ColdRequest{Function: "echo"}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	swaps := 0
	for gen := 2; gen <= 40; gen++ {
		staging := s.pins.Staging(dir, restore.REAP, fmt.Sprintf("op-test%d", gen))
		if err := writeGen(staging, gen); err != nil {
			t.Fatal(err)
		}
		if err := s.pins.Swap(dir, restore.REAP, staging); err != nil {
			t.Fatal(err)
		}
		swaps++
		time.Sleep(3 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	if w.mixed.Load() != 0 || w.begins.Load() < 10 || swaps != 39 {
		t.Fatalf("%d of %d restores saw a mixed set over %d swaps", w.mixed.Load(), w.begins.Load(), swaps)
	}
	if g := readGen(filepath.Join(dir, "strategies", "reap", "gen.bin")); g != 40 {
		t.Fatalf("generation %d in place", g)
	}
}

// A refresh that fails (the disk full, say) leaves the old set in place,
// says why, is counted, and holds further refreshes off for the backoff.
func TestFailedRefreshKeepsOldSet(t *testing.T) {
	w := &genWorld{outside: func(int) uint64 { return 50 }}
	w.refresh = func(context.Context, restore.RecordHost, restore.Snapshot) error {
		return fmt.Errorf("write ws.bin: %w", syscall.ENOSPC)
	}
	s, res := preparedGen(t, w, nil)
	for i := 0; i < policy.DriftCount; i++ {
		coldOf(t, s, "echo", "")
	}
	r := endedRefresh(t, s, "echo")
	if r.State != wire.OpFailed || !strings.Contains(r.Error, "no space left for thaw's data") || len(r.Sets) != 0 {
		t.Fatalf("refresh %+v", r)
	}
	op, _ := endedOperation(t, s, r.Operation)
	if op.State != wire.OpFailed || !errors.Is(op.Err, ErrNoSpace) {
		t.Fatalf("operation %+v", op)
	}
	if g := readGen(filepath.Join(res.Warm.Dir, "strategies", "reap", "gen.bin")); g != 1 {
		t.Fatalf("generation %d in place after a failed refresh", g)
	}
	if ents, _ := filepath.Glob(filepath.Join(res.Warm.Dir, snapshots.StagingPrefix+"*")); len(ents) != 0 {
		t.Fatalf("staging left: %v", ents)
	}
	for i := 0; i < 2*policy.DriftCount; i++ {
		coldOf(t, s, "echo", "")
	}
	time.Sleep(100 * time.Millisecond)
	if n := w.refreshN.Load(); n != 1 {
		t.Fatalf("%d refreshes during the backoff", n)
	}
	if !strings.Contains(promText(t, s), `thaw_workingset_refreshes_total{outcome="failed",source="prepare",strategy="reap"} 1`) {
		t.Error("failed refresh not counted")
	}
	// Cold starts still restore the old set, whole.
	if inv := coldOf(t, s, "echo", ""); inv.Strategy != "reap" || inv.StrategyStats.Fallback != "" || w.mixed.Load() != 0 {
		t.Fatalf("%+v", inv)
	}
}

// A daemon stopped during a refresh: the next start removes the staging it
// left (before or after its swap), marks the refresh interrupted, saying
// which set is in place, and cold starts restore that set, whole.
func TestRefreshInterruptedByRestart(t *testing.T) {
	w := &genWorld{}
	s, res := preparedGen(t, w, nil)
	ctx := context.Background()
	coldOf(t, s, "echo", "")
	// What a crash in the middle leaves: a half-written staging directory,
	// one holding the old set after the swap, and the refresh recorded as
	// running.
	dir := res.Warm.Dir
	half := s.pins.Staging(dir, restore.REAP, "op-000000000001")
	if err := os.MkdirAll(half, 0o700); err != nil || os.WriteFile(filepath.Join(half, "gen.json"), []byte("2"), 0o600) != nil {
		t.Fatal(err)
	}
	if err := writeGen(s.pins.Staging(dir, restore.REAP, "op-000000000002"), 0); err != nil {
		t.Fatal(err)
	}
	editRestoreDoc(t, s, "echo", func(doc map[string]any) {
		refreshes, _ := doc["refreshes"].([]any)
		doc["refreshes"] = append(refreshes, wire.WorkingSetRefresh{Operation: "op-000000000001", Snapshot: res.Warm.ID,
			Strategies: []string{"reap"}, State: wire.OpRunning, StartedAt: time.Now()})
	})
	cfg := s.cfg
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	s2, err := New(ctx, cfg, s.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s2.Close(context.Background()) })
	if ents, _ := filepath.Glob(filepath.Join(dir, snapshots.StagingPrefix+"*")); len(ents) != 0 {
		t.Fatalf("staging left after a restart: %v", ents)
	}
	doc, err := s2.FunctionRestore(ctx, "echo")
	if err != nil {
		t.Fatal(err)
	}
	r := doc.Versions[0].Refreshes[0]
	if r.State != "interrupted" || !strings.Contains(r.Error, "the daemon stopped during the refresh") || r.EndedAt.IsZero() {
		t.Fatalf("refresh after restart %+v", r)
	}
	inv, err := s2.InvokeCold(ctx, ColdRequest{Function: "echo"})
	if err != nil || inv.Strategy != "reap" || w.mixed.Load() != 0 {
		t.Fatalf("%v %+v", err, inv)
	}
	if g := readGen(filepath.Join(dir, "strategies", "reap", "gen.bin")); g != 1 {
		t.Fatalf("generation %d", g)
	}
}

// A version whose snapshot has no artifacts is prepared in the background
// after PrepareAfter cold starts under auto (never on a request's path);
// the next cold starts restore the warm snapshot it made.
func TestBackgroundPrepare(t *testing.T) {
	w := &genWorld{}
	s := genService(t, w, func(c *Config) {
		c.Adaptive = AdaptiveConfig{DefaultStrategy: wire.StrategyAuto, DefaultRefresh: wire.RefreshPrepare, PrepareAfter: 2}
	})
	ctx := context.Background()
	_, plain := bootAndSnapshot(t, s, "echo")
	for i := 0; i < 2; i++ {
		if inv := coldOf(t, s, "echo", ""); inv.Strategy != "vanilla" || inv.Snapshot != plain.ID {
			t.Fatalf("cold start %d: %s on %s", i, inv.Strategy, inv.Snapshot)
		}
	}
	var doc *wire.FunctionRestore
	waitFor(t, 60*time.Second, "the background prepare", func() bool {
		doc, _ = s.FunctionRestore(ctx, "echo")
		p := doc.Versions[0].Prepare
		return p != nil && p.State != wire.OpRunning
	})
	p := doc.Versions[0].Prepare
	if p.State != wire.OpSucceeded || p.Snapshot == "" || !strings.Contains(p.Reason, "2 cold starts under auto restored "+plain.ID) {
		t.Fatalf("background prepare %+v", p)
	}
	if op, err := endedOperation(t, s, p.Operation); err != nil || op.Kind != wire.OpPrepare || op.State != wire.OpSucceeded {
		t.Fatalf("operation %+v %v", op, err)
	}
	inv := coldOf(t, s, "echo", "")
	if inv.Snapshot != p.Snapshot || inv.Strategy != "reap" || inv.StrategyChoice.How != policy.HowRule {
		t.Fatalf("after the prepare: %s on %s, %+v", inv.Strategy, inv.Snapshot, inv.StrategyChoice)
	}
	if _, err := s.db.PrepareEvent(ctx, p.Snapshot); err != nil {
		t.Fatalf("its record input (the prepare's default, null) is not kept: %v", err)
	}
	if !strings.Contains(promText(t, s), `thaw_background_prepares_total{outcome="succeeded"} 1`) {
		t.Error("background prepare not counted")
	}
}

// A refresh asked for records the named sets again now with the given
// input, or refuses at once what it cannot do.
func TestRefreshAskedFor(t *testing.T) {
	w := &genWorld{}
	s, res := preparedGen(t, w, nil)
	ctx := context.Background()
	if _, err := s.RefreshWorkingSets(ctx, RefreshRequest{Function: "echo", Strategies: []string{"snapbpf"}}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), `no recorded set of strategy "snapbpf" (it has: reap, faasnap)`) {
		t.Fatalf("unknown strategy: %v", err)
	}
	if _, err := s.RefreshWorkingSets(ctx, RefreshRequest{Function: "echo", Event: json.RawMessage(`{`)}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("bad event: %v", err)
	}
	if _, err := s.RefreshWorkingSets(ctx, RefreshRequest{Function: "none"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("unknown function: %v", err)
	}
	r, err := s.RefreshWorkingSets(ctx, RefreshRequest{Function: "echo", Event: json.RawMessage(`{"x":9}`), Strategies: []string{"reap"}})
	if err != nil || r.State != wire.OpSucceeded || r.Source != "request" || len(r.Sets) != 1 || r.Sets[0].PagesAfter != 102 {
		t.Fatalf("refresh: %v %+v", err, r)
	}
	if g := readGen(filepath.Join(res.Warm.Dir, "strategies", "reap", "gen.json")); g != 2 {
		t.Fatalf("generation %d", g)
	}
	op, err := s.StartRefresh(ctx, RefreshRequest{Function: "echo"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the refresh operation", func() bool {
		o, _ := s.Operation(ctx, op.ID)
		return o.State != wire.OpRunning
	})
	// Every recorded set: the gen strategy's and FaaSnap's real one (its
	// record on the fake VMM, a new loading set of the warm memory).
	if o, _ := s.Operation(ctx, op.ID); o.State != wire.OpSucceeded || o.Result.Refresh == nil || o.Result.Refresh.Operation != op.ID ||
		len(o.Result.Refresh.Sets) != 2 || o.Result.Refresh.Sets[1].Strategy != "faasnap" || o.Result.Refresh.Sets[1].BytesAfter == 0 {
		t.Fatalf("operation %+v %+v", o, o.Result.Refresh)
	}
	if inv := coldOf(t, s, "echo", "faasnap"); inv.Strategy != "faasnap" || inv.StrategyStats.Fallback != "" {
		t.Fatalf("faasnap after its refresh: %+v", inv.StrategyStats)
	}
	doc, _ := s.FunctionRestore(ctx, "echo")
	if rs := doc.Versions[0].Refreshes; len(rs) != 2 || rs[0].Operation != op.ID || rs[0].Reason != "asked for" {
		t.Fatalf("refreshes %+v", rs)
	}
	// A snapshot without recorded sets has nothing to refresh.
	_, _ = bootAndSnapshot(t, s, "plain")
	if _, err := s.RefreshWorkingSets(ctx, RefreshRequest{Function: "plain"}); !errors.Is(err, ErrConflict) ||
		!strings.Contains(err.Error(), "no recorded working set to refresh: prepare plain first") {
		t.Fatalf("plain: %v", err)
	}
}

// editRestoreDoc changes the adaptive restore's document of fn's version 0
// in the catalog, and has the daemon read it from there again.
func editRestoreDoc(t *testing.T, s *Service, fn string, edit func(doc map[string]any)) {
	t.Helper()
	ctx := context.Background()
	b, err := s.db.RestoreState(ctx, fn, 0)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if b, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	if err := s.db.PutRestoreState(ctx, fn, 0, b); err != nil {
		t.Fatal(err)
	}
	s.adaptive.Forget(fn)
}

// setLocalChoice makes strategy the adaptive restore's current choice for
// fn's version 0 on its local snapshot.
func setLocalChoice(t *testing.T, s *Service, fn, strategy string) {
	t.Helper()
	editRestoreDoc(t, s, fn, func(doc map[string]any) {
		locs, _ := doc["locations"].(map[string]any)
		local, ok := locs["local"].(map[string]any)
		if !ok {
			t.Fatalf("no local location in %v", doc)
		}
		local["choice"] = strategy
	})
}

// endedRefresh waits until function's only refresh has ended and returns it.
func endedRefresh(t *testing.T, s *Service, function string) wire.WorkingSetRefresh {
	t.Helper()
	var doc *wire.FunctionRestore
	waitFor(t, 30*time.Second, "the refresh to end", func() bool {
		doc, _ = s.FunctionRestore(context.Background(), function)
		rs := doc.Versions[0].Refreshes
		return len(rs) == 1 && rs[0].State != wire.OpRunning
	})
	return doc.Versions[0].Refreshes[0]
}

// endedOperation is operation id once it has ended. A restore document
// records a refresh's or prepare's end inside the operation's work, and the
// operation ends when that work returns, a moment later.
func endedOperation(t *testing.T, s *Service, id string) (*Operation, error) {
	t.Helper()
	var op *Operation
	var err error
	waitFor(t, 10*time.Second, "operation "+id+" to end", func() bool {
		op, err = s.Operation(context.Background(), id)
		return err != nil || op.State != wire.OpRunning
	})
	return op, err
}
