package bench

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

func f64(x float64) *float64 { return &x }

// restoreSynthetic has a miss group of 4 (one refused by admission), a hit
// group of 4 (one answer that started its VMM) and a miss group of 1 with
// the daemon's CPU unmeasured.
func restoreSynthetic() *RestoreResult {
	r := &RestoreResult{When: time.Date(2026, 11, 24, 20, 0, 0, 0, time.UTC),
		Machine: Machine{Cores: 2, MemoryGiB: 24, CPU: "AMD EPYC", Kernel: "6.18", Accel: "tcg", QEMU: "7.2.22", Disk: "vda (ssd/nvme)"},
		Config:  RestoreConfig{Function: "hello", MemoryMiB: 512, Strategies: []string{"vanilla"}, Concurrency: []int{1, 4}, Reps: 1}}
	for k, setup := range []float64{40, 50, 60} {
		r.Samples = append(r.Samples, RestoreSample{Strategy: "vanilla", Pool: PoolMiss, Concurrency: 4, Slot: k, VMM: "started",
			SetupMS: setup, ResumeMS: 100, TotalMS: setup + 110, QEMUCPUMS: f64(100 + 10*float64(k)), DaemonCPUMS: f64(10)})
	}
	r.Samples = append(r.Samples, RestoreSample{Strategy: "vanilla", Pool: PoolMiss, Concurrency: 4, Slot: 3,
		Error: "too many requests: ...", TooMany: true})
	for k, setup := range []float64{8, 10, 12} {
		r.Samples = append(r.Samples, RestoreSample{Strategy: "vanilla", Pool: PoolHit, Concurrency: 4, Slot: k, VMM: "pooled",
			SetupMS: setup, ResumeMS: 60, TotalMS: setup + 70, QEMUCPUMS: f64(70), StandbyCPUMS: f64(40), DaemonCPUMS: f64(5)})
	}
	r.Samples = append(r.Samples, RestoreSample{Strategy: "vanilla", Pool: PoolHit, Concurrency: 4, Slot: 3, VMM: "started",
		SetupMS: 500, ResumeMS: 60, TotalMS: 570, QEMUCPUMS: f64(100), DaemonCPUMS: f64(5)})
	r.Samples = append(r.Samples, RestoreSample{Strategy: "vanilla", Pool: PoolMiss, Concurrency: 1, VMM: "started",
		SetupMS: 44, ResumeMS: 70, TotalMS: 120, QEMUCPUMS: f64(90)})
	r.Summarize()
	return r
}

func TestRestoreSummarize(t *testing.T) {
	r := restoreSynthetic()
	if len(r.Groups) != 3 {
		t.Fatalf("%d groups, want 3 (miss 1, miss 4, hit 4; no hit 1): %+v", len(r.Groups), r.Groups)
	}
	miss, _ := r.Group("vanilla", PoolMiss, 4)
	if miss.Samples != 4 || miss.Failed != 1 || miss.TooMany != 1 || miss.Mismatched != 0 {
		t.Errorf("miss counts: %+v", miss)
	}
	if s := miss.Summaries[RowSetup]; s.N != 3 || s.Median != 50 {
		t.Errorf("miss set-up %+v, want median 50 of 3 (the 429 left out)", s)
	}
	if s := miss.Summaries[RowCPU]; s.Median != 120 || s.P10 != 112 {
		t.Errorf("miss CPU %+v, want QEMU + daemon: median 120, p10 112", s)
	}
	hit, _ := r.Group("vanilla", PoolHit, 4)
	if hit.Mismatched != 1 || hit.Failed != 0 {
		t.Errorf("hit counts: %+v", hit)
	}
	if s := hit.Summaries[RowSetup]; s.N != 3 || s.Median != 10 || s.Max != 12 {
		t.Errorf("hit set-up %+v: the answer that started its VMM must not count as a hit", s)
	}
	if s := hit.Summaries[RowStandbyCPU]; s.N != 3 || s.Median != 40 {
		t.Errorf("standby CPU %+v", s)
	}
	one, _ := r.Group("vanilla", PoolMiss, 1)
	if _, ok := one.Summaries[RowDaemonCPU]; ok {
		t.Errorf("daemon CPU summarized where it was not measured: %+v", one.Summaries)
	}
	if _, ok := one.Summaries[RowCPU]; ok {
		t.Errorf("CPU total summarized without the daemon's part: %+v", one.Summaries)
	}
}

func TestRestoreMarkdown(t *testing.T) {
	md := restoreSynthetic().Markdown()
	benchtest.WantAll(t, "markdown", md,
		"| vanilla | miss | 4 | 3/4 | 50.0 (42.0–58.0) | 100.0 (100.0–100.0) | 160.0 (152.0–168.0) | 110.0 (102.0–118.0) | 10.0 (10.0–10.0) | 120.0 (112.0–128.0) | – | 1 refused (429) |",
		"| vanilla | hit | 4 | 3/4 | 10.0 (8.4–11.6) |",
		"| 40.0 (40.0–40.0) | 1 not pooled (excluded) |",
		"| vanilla | miss | 1 | 1/1 | 44.0 (44.0–44.0) | 70.0 (70.0–70.0) | 120.0 (120.0–120.0) | 90.0 (90.0–90.0) | unmeasured | unmeasured | – |  |",
		"AMD EPYC", "accelerator **tcg**", "`hello`, 512 MiB",
	)
	if i, j := strings.Index(md, "| vanilla | miss | 1 |"), strings.Index(md, "| vanilla | hit | 4 |"); i < 0 || j < 0 || i > j {
		t.Errorf("misses must come before hits:\n%s", md)
	}
}

func TestRestoreFiguresAndRoundTrip(t *testing.T) {
	r := restoreSynthetic()
	figs := r.Figures()
	for _, name := range []string{"restore-setup.svg", "restore-cpu.svg"} {
		if svg := figs[name]; !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "vanilla N=4") || !strings.Contains(svg, "hit") {
			t.Errorf("%s: %.200s", name, svg)
		}
	}
	// A hit of 1 was not measured: a gap, not a bar of 0.
	if strings.Contains(figs["restore-setup.svg"], "vanilla N=1 / hit") {
		t.Error("a bar for a group without samples")
	}
	dir := t.TempDir()
	if _, err := WriteRestore(dir, r); err != nil {
		t.Fatal(err)
	}
	back, err := ReadRestore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Samples) != len(r.Samples) || back.Markdown() != r.Markdown() {
		t.Fatalf("round trip changed the run:\n%s\n---\n%s", back.Markdown(), r.Markdown())
	}
	if back.Samples[0].QEMUCPUMS == nil || back.Samples[len(back.Samples)-1].DaemonCPUMS != nil {
		t.Error("measured and unmeasured CPU times do not survive the round trip")
	}
}

func TestRestoreSampleOf(t *testing.T) {
	inv := &client.Invocation{OK: true, Mode: "cold", Process: &client.Process{CPUTotalMS: 110},
		Timing: client.Timing{TotalMS: 80, InvokeMS: 5, Restore: &client.RestoreTiming{VMM: "pooled", SetupMS: 9, ResumeMS: 60, StandbyCPUMS: 40}}}
	s := restoreSampleOf(inv, nil, 90*time.Millisecond)
	if !s.Hit() || s.SetupMS != 9 || s.WallMS != 90 || *s.QEMUCPUMS != 70 || *s.StandbyCPUMS != 40 {
		t.Errorf("pooled answer: %+v", s)
	}
	inv.Timing.Restore = &client.RestoreTiming{VMM: "started", SetupMS: 45}
	s = restoreSampleOf(inv, nil, 0)
	if s.Hit() || *s.QEMUCPUMS != 110 || s.StandbyCPUMS != nil {
		t.Errorf("started answer: %+v", s)
	}
	inv.Process = nil
	if s := restoreSampleOf(inv, nil, 0); s.QEMUCPUMS != nil {
		t.Errorf("QEMU CPU without process counters: %v", *s.QEMUCPUMS)
	}
	s = restoreSampleOf(nil, errors.Join(errors.New("429"), client.ErrTooMany), 0)
	if !s.TooMany || s.Error == "" || s.Hit() {
		t.Errorf("refused: %+v", s)
	}
	if s := restoreSampleOf(&client.Invocation{OK: true, Mode: "warm"}, nil, 0); s.Error == "" {
		t.Error("an answer without restore timing counted")
	}
}

func TestRestoreConfigCheck(t *testing.T) {
	c := DefaultRestoreConfig(".")
	if err := c.Check([]string{"vanilla", "faasnap"}); err != nil {
		t.Fatal(err)
	}
	c.Concurrency, c.Strategies, c.Reps = []int{0, 17}, []string{"nope"}, 0
	err := c.Check([]string{"vanilla"})
	for _, want := range []string{"concurrency 0", "concurrency 17", `"nope"`, "reps"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

func TestCountVMs(t *testing.T) {
	vms := []client.VM{
		{Function: "f", State: "standby", Snapshot: "s", Strategy: "vanilla"},
		{Function: "f", State: "standby", Snapshot: "s", Strategy: "faasnap"},
		{Function: "f", State: "booting", Snapshot: "s", Strategy: "vanilla"},
		{Function: "f", State: "running"},
		{Function: "f", State: "stopped"},
		{Function: "g", State: "standby", Snapshot: "s", Strategy: "vanilla"},
	}
	if sb, st, busy := countVMs(vms, "f", "s", "vanilla"); sb != 1 || st != 1 || busy != 2 {
		t.Fatalf("countVMs = %d standby, %d starting, %d busy; want 1, 1, 2", sb, st, busy)
	}
}

func TestCountVMsNoStrategy(t *testing.T) {
	// drain counts every live VM of the function as busy.
	vms := []client.VM{{Function: "f", State: "standby", Snapshot: "s", Strategy: "vanilla"}, {Function: "f", State: "booting"}}
	if sb, st, busy := countVMs(vms, "f", "", ""); sb != 0 || st != 1 || busy != 1 {
		t.Fatalf("countVMs = %d, %d, %d; want 0, 1, 1", sb, st, busy)
	}
}
