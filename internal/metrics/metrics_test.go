package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/thaw-dev/thaw/wire"
)

func TestInvocationsRequestsAndState(t *testing.T) {
	s := New(func() State {
		return State{VMs: map[string]int{"running": 2, "stopped": 5},
			Store:  &wire.StoreInfo{Available: true, Kind: "tmpfs", CapacityBytes: 1 << 30, UsedBytes: 1 << 20},
			Chunks: &ChunkCache{FetchedBytes: 4096, FetchedChunks: 2, Hits: 7, UsedBytes: 1 << 20, BudgetBytes: 1 << 30}}
	})
	cold := &wire.Invocation{Mode: "cold", Strategy: "faasnap",
		Timing:        wire.Timing{Restore: &wire.RestoreTiming{SetupMS: 60, ResumeMS: 90}, InvokeMS: 8, TotalMS: 170},
		Process:       &wire.ProcessCounters{MajorFaults: 3, MinorFaults: 1000, ReadBytes: 4096},
		StrategyStats: &wire.StrategyStats{Kind: "faasnap", DaemonReadBytes: 1 << 20}}
	fellBack := &wire.Invocation{Mode: "cold", Strategy: "vanilla",
		Timing:        wire.Timing{Restore: &wire.RestoreTiming{SetupMS: 70, ResumeMS: 120}, InvokeMS: 9, TotalMS: 210},
		StrategyStats: &wire.StrategyStats{Fallback: "premap artifacts unusable, restored with vanilla: snapshot x: not in the memory store"}}
	warm := &wire.Invocation{Mode: "warm", Timing: wire.Timing{InvokeMS: 2, TotalMS: 2}}
	for _, inv := range []*wire.Invocation{cold, cold, fellBack, warm} {
		s.Invocation(inv)
	}
	s.Request("GET /v1/info", 200, 3*time.Millisecond)
	s.Request("", 404, time.Millisecond)

	for _, c := range []struct {
		got  float64
		want float64
		what string
	}{
		{testutil.ToFloat64(s.faults.WithLabelValues("faasnap", "major")), 6, "faasnap major faults"},
		{testutil.ToFloat64(s.reads.WithLabelValues("faasnap", "daemon")), 2 << 20, "faasnap loader bytes"},
		{testutil.ToFloat64(s.fallbacks.WithLabelValues("premap", "not_stored")), 1, "premap fallback"},
		{testutil.ToFloat64(s.requests.WithLabelValues("GET /v1/info", "200")), 1, "info requests"},
		{testutil.ToFloat64(s.requests.WithLabelValues("unmatched", "404")), 1, "unmatched requests"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(s.setup); n != 2 { // faasnap/cold and vanilla/cold; warm has no restore
		t.Errorf("%d set-up series, want 2", n)
	}
	exposition := `
# HELP thaw_vms VMs by state (the catalog's records; live ones are booting, standby, running or paused).
# TYPE thaw_vms gauge
thaw_vms{state="running"} 2
thaw_vms{state="stopped"} 5
`
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(exposition), "thaw_vms"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(`
# HELP thaw_store_used_bytes Memory store bytes used by stored snapshot copies.
# TYPE thaw_store_used_bytes gauge
thaw_store_used_bytes{tier="tmpfs"} 1.048576e+06
`), "thaw_store_used_bytes"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(s.Registry, strings.NewReader(`
# HELP thaw_registry_cache_hits_total Chunk lookups the chunk cache served from disk.
# TYPE thaw_registry_cache_hits_total counter
thaw_registry_cache_hits_total 7
# HELP thaw_registry_fetched_bytes_total Compressed bytes the chunk cache fetched from the snapshot registry.
# TYPE thaw_registry_fetched_bytes_total counter
thaw_registry_fetched_bytes_total 4096
`), "thaw_registry_cache_hits_total", "thaw_registry_fetched_bytes_total"); err != nil {
		t.Error(err)
	}
	// Histograms count what was observed, by strategy and mode.
	if n := testutil.CollectAndCount(s.total); n != 3 { // faasnap/cold, vanilla/cold, boot/warm
		t.Errorf("%d invocation series, want 3", n)
	}
}

func TestFallbackReasons(t *testing.T) {
	for text, want := range map[string]string{
		"premap artifacts unusable, restored with vanilla: snapshot s: not in the memory store (store it ...)": "not_stored",
		"reap artifacts unusable, restored with vanilla: open x/ws.bin: no such file or directory":             "missing",
		"premap artifacts unusable, restored with vanilla: the store's copy of s is damaged (sha256 ...)":      "damaged",
		"faasnap artifacts unusable, restored with vanilla: something new":                                     "other",
	} {
		if got := FallbackReason(text); got != want {
			t.Errorf("%q: %s, want %s", text, got, want)
		}
	}
}
