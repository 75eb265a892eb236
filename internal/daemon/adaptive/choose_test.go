package adaptive

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/policy"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/wire"
)

// A cold start's strategy: the request's wins, then the function's fixed
// one; under auto the policy decides among the strategies whose artifacts
// exist, in the rule's order, counting the choice; Current reads the
// choice without counting it; an observed cold start is evidence.
func TestSettleAndDecide(t *testing.T) {
	w := newWorld(t, Config{DefaultStrategy: wire.StrategyAuto, PrepareAfter: -1})
	ctx := context.Background()
	w.function("echo")
	sn := w.snapshot("echo", 0, false, restore.REAP, restore.SnapBPF)
	vanilla := restore.Strategy{Kind: restore.Vanilla}
	if st, c, auto := w.m.Settle(ctx, ColdRequest{Strategy: "reap"}, sn.ID, vanilla); st.Kind != restore.Vanilla || c.How != "request" || auto != nil {
		t.Fatalf("request's strategy: %s %+v %v", st.Kind, c, auto)
	}
	if _, c, auto := w.m.Settle(ctx, ColdRequest{Snapshot: sn.ID}, sn.ID, vanilla); c.How != "daemon" || auto != nil ||
		!strings.Contains(c.Reason, "a named snapshot restores with the daemon's default") {
		t.Fatalf("named snapshot: %+v %v", c, auto)
	}
	_, c, auto := w.m.Settle(ctx, ColdRequest{}, sn.ID, vanilla)
	if c != nil || auto == nil || strings.Join(auto.arms, ",") != "reap,snapbpf" || auto.loc != locLocal ||
		auto.rule != "locally, faasnap where the snapshot has its artifacts, then reap, snapbpf" {
		t.Fatalf("auto: %+v %+v", c, auto)
	}
	if st, err := w.m.Current(ctx, sn.ID); err != nil || st.Kind != restore.REAP {
		t.Fatalf("current: %s %v", st.Kind, err)
	}
	if n := w.metrics.count("choice reap local rule"); n != 0 {
		t.Fatalf("Current counted %d choices", n)
	}
	st, c := w.m.Decide(ctx, auto, vanilla)
	if st.Kind != restore.REAP || c.How != policy.HowRule || !strings.Contains(c.Reason, "rule: locally") {
		t.Fatalf("decided %s %+v", st.Kind, c)
	}
	if n := w.metrics.count("choice reap local rule"); n != 1 {
		t.Fatalf("%d choices counted", n)
	}
	w.m.Observe(ctx, w.cold(sn, "reap", 120, 0))
	loc := w.doc("echo").Locations
	if len(loc) != 1 || loc[0].Location != locLocal || loc[0].Snapshot != sn.ID || loc[0].Choice != "reap" || loc[0].ColdStarts != 1 ||
		len(loc[0].Evidence) != 1 || loc[0].Evidence[0].Samples != 1 || loc[0].Evidence[0].MedianTotalMS != 120 {
		t.Fatalf("locations %+v", loc)
	}
	// The function's fixed strategy wins over auto; one not offered falls
	// back to the daemon's choice, saying why.
	for _, tc := range []struct{ set, want, how string }{{"snapbpf", "snapbpf", "function"}, {"premap", "vanilla", "daemon"}} {
		if _, err := w.m.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &tc.set}); err != nil {
			t.Fatal(err)
		}
		st, c, auto := w.m.Settle(ctx, ColdRequest{}, sn.ID, vanilla)
		if string(st.Kind) != tc.want || c.How != tc.how || auto != nil {
			t.Fatalf("function's %s: %s %+v", tc.set, st.Kind, c)
		}
	}
}

// A snapshot whose memory is in the registry starts with the remote
// strategy and only strategies that restore lazily are arms; one that no
// strategy can restore as itself restores with the daemon's default.
func TestArmsByLocation(t *testing.T) {
	w := newWorld(t, Config{DefaultStrategy: wire.StrategyAuto, PrepareAfter: -1})
	ctx := context.Background()
	w.function("echo")
	remote := w.snapshot("echo", 0, true, restore.REAP, restore.SnapBPF)
	_, _, auto := w.m.Settle(ctx, ColdRequest{}, remote.ID, restore.Strategy{})
	if auto == nil || strings.Join(auto.arms, ",") != "snapbpf" || auto.loc != locRemote || !strings.Contains(auto.rule, "a snapshot in the registry starts with snapbpf") {
		t.Fatalf("remote: %+v", auto)
	}
	if st, c := w.m.Decide(ctx, auto, restore.Strategy{}); st.Kind != restore.SnapBPF || c.How != policy.HowRule || w.metrics.count("choice snapbpf remote rule") != 1 {
		t.Fatalf("remote decided %s %+v", st.Kind, c)
	}
	bare := w.snapshot("echo", 0, false)
	if _, c, auto := w.m.Settle(ctx, ColdRequest{}, bare.ID, restore.Strategy{}); auto != nil || c.How != "daemon" ||
		!strings.Contains(c.Reason, "no strategy can restore "+bare.ID) {
		t.Fatalf("no artifacts: %+v %+v", c, auto)
	}
	if _, err := w.m.Current(ctx, bare.ID); !errors.Is(err, errdefs.ErrSnapshotUnusable) {
		t.Fatalf("current without arms: %v", err)
	}
}

// Restore settings: checked before anything changes, "default" returns a
// setting to the daemon's, and a function created again does not inherit
// the settings of the one of its name before.
func TestRestoreSettings(t *testing.T) {
	w := newWorld(t, Config{})
	ctx := context.Background()
	fn := w.function("echo")
	doc, err := w.m.FunctionRestore(ctx, "echo")
	if err != nil || doc.Strategy != string(restore.Default) || doc.StrategyFrom != "daemon" || doc.Refresh != wire.RefreshOff || doc.RefreshFrom != "daemon" {
		t.Fatalf("defaults %+v %v", doc, err)
	}
	bad, auto, traffic, def := "fastest", wire.StrategyAuto, wire.RefreshTraffic, SettingDefault
	if _, err := w.m.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &bad, Refresh: &traffic}); !errors.Is(err, errdefs.ErrInvalid) ||
		!strings.Contains(err.Error(), `strategy "fastest": give auto or one of the strategies`) {
		t.Fatalf("bad strategy: %v", err)
	}
	if _, err := w.m.SetRestoreSettings(ctx, "none", wire.RestoreSettings{Strategy: &auto}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown function: %v", err)
	}
	if doc, err := w.m.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &auto, Refresh: &traffic}); err != nil ||
		doc.Strategy != auto || doc.StrategyFrom != "function" || doc.Refresh != traffic || doc.RefreshFrom != "function" {
		t.Fatalf("set: %+v %v", doc, err)
	}
	if doc, err := w.m.SetRestoreSettings(ctx, "echo", wire.RestoreSettings{Strategy: &def}); err != nil ||
		doc.StrategyFrom != "daemon" || doc.Refresh != traffic {
		t.Fatalf("strategy back to the default: %+v %v", doc, err)
	}
	// The same name created again: its own settings only.
	if err := w.db.DeleteFunction(ctx, "echo"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	again := w.function("echo")
	if again.CreatedAt.Equal(fn.CreatedAt) {
		t.Fatal("the function created again has the same creation time")
	}
	if doc := w.m.RestoreDoc(ctx, "echo"); doc.RefreshFrom != "daemon" {
		t.Fatalf("settings of the earlier function: %+v", doc)
	}
	if err := w.m.Created(ctx, again, "reap", SettingDefault); err != nil {
		t.Fatal(err)
	}
	if doc := w.m.RestoreDoc(ctx, "echo"); doc.Strategy != "reap" || doc.StrategyFrom != "function" || doc.RefreshFrom != "daemon" {
		t.Fatalf("created with reap: %+v", doc)
	}
	if doc := w.m.RestoreDoc(ctx, "none"); doc != nil {
		t.Fatalf("document of no function: %+v", doc)
	}
}

// CheckRestoreSettings and Config.Validate refuse what is not a setting.
func TestSettingsChecked(t *testing.T) {
	for _, tc := range []struct {
		strategy, refresh string
		ok                bool
	}{{"", "", true}, {"auto", "prepare", true}, {"reap", "traffic", true}, {SettingDefault, SettingDefault, true},
		{"quick", "", false}, {"", "never", false}} {
		err := CheckRestoreSettings(tc.strategy, tc.refresh)
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("%q %q: %v", tc.strategy, tc.refresh, err)
		}
	}
	errs := Config{DefaultStrategy: "quick", DefaultRefresh: "never", Backoff: -time.Second, MaxBackground: 65}.Validate()
	if len(errs) != 4 {
		t.Fatalf("every problem reported at once: %v", errs)
	}
	if errs := (Config{DefaultStrategy: wire.StrategyAuto, DefaultRefresh: wire.RefreshOff}).Validate(); len(errs) != 0 {
		t.Fatalf("a good configuration: %v", errs)
	}
}
