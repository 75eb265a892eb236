package bench

import (
	"context"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/bench/benchtest"
)

// TestRemoteReport: the report's groups, ratios and target verdicts come
// from the samples; failed samples count in ok/n but not in the cells.
func TestRemoteReport(t *testing.T) {
	r := &RemoteResult{Config: RemoteConfig{Reps: 2, Lazy: []string{"vanilla", "faasnap"}},
		Prepared: []RemotePrepared{{Function: "hello", Snapshot: "snap-1", LoadingSetBytes: 10 << 20,
			Push: &client.PushResult{ChunkSize: 1 << 20, Chunks: 90, Uploaded: 80, StoredBytes: 40 << 20, DataBytes: 160 << 20, PushMS: 900}}}}
	add := func(kind, st string, ok bool, imp, total float64, fetched int64) {
		r.Samples = append(r.Samples, RemoteSample{Function: "hello", Kind: kind, Strategy: st, OK: ok,
			FirstAnswerMS: imp + total + 5, ImportMS: imp, TotalMS: total, FetchedBytes: fetched, FetchedChunks: fetched >> 19})
	}
	add(RemoteLocal, "vanilla", true, 0, 200, 0)
	add(RemoteLocal, "vanilla", true, 0, 200, 0)
	add(RemoteLazy, "vanilla", true, 300, 600, 30<<20)
	add(RemoteLazy, "vanilla", false, 0, 0, 0)
	add(RemoteLazy, "faasnap", true, 100, 150, 12<<20)
	add(RemoteLazy, "faasnap", true, 100, 150, 12<<20)
	add(RemotePull, "vanilla", true, 0, 200, 40<<20)
	md := r.Markdown()
	benchtest.WantAll(t, "report", md,
		"| hello | lazy | vanilla | 1/2 | 905 (905–905) | 300 (300–300) | 600 (600–600) | 900 (900–900) | 30.0 MiB | 0.0 MiB | 3.00x | 60 | 6.00x |",
		"| hello | lazy | faasnap | 2/2 |",
		"hello, lazy vanilla: fetched 30.0 MiB = 3.00x the loading set (target at most 1.3x): **not met**",
		"hello, lazy faasnap: fetched 12.0 MiB = 1.20x the loading set (target at most 1.3x): met; uncompressed, 24 chunks hold at most 2.40x: **not met**",
		"hello, lazy vanilla: cold 900 ms (import 300 + restore 600) = 4.50x local vanilla 200 ms (restore alone 3.00x); target at most 2x: **not met**",
		"hello, lazy faasnap: cold 250 ms (import 100 + restore 150) = 1.25x local vanilla 200 ms (restore alone 0.75x); target at most 2x: met",
		"| hello | snap-1 | 0.0 s | 10.0 MiB | 0 pages | 900 ms | 90 (80) | 40.0 MiB | 160.0 MiB |",
	)
}

// TestRemoteRefusesEmpty: a run without functions or repetitions is
// refused before anything is contacted.
func TestRemoteRefusesEmpty(t *testing.T) {
	for _, cfg := range []RemoteConfig{{Reps: 1}, {Reps: 0, Cases: DefaultRemoteCases(".")}} {
		if _, err := RunRemote(context.Background(), RemoteNodes{}, cfg); err == nil {
			t.Errorf("%+v: accepted", cfg)
		}
	}
}
