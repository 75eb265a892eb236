package fresh

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// The trace's arrivals are the same for a seed, sorted, about Rate a
// second, with its bursts, and differ for another seed.
func TestArrivals(t *testing.T) {
	tc := TraceConfig{Seconds: 100, Rate: 5, BurstSize: 3, BurstEvery: 20, Seed: 7}
	a, b := Arrivals(tc), Arrivals(tc)
	if !slices.Equal(a, b) {
		t.Fatal("the same seed gave different arrivals")
	}
	if !slices.IsSorted(a) {
		t.Fatal("arrivals not sorted")
	}
	bursts := 0
	for _, at := range []time.Duration{10 * time.Second, 30 * time.Second, 50 * time.Second, 70 * time.Second, 90 * time.Second} {
		n := 0
		for _, x := range a {
			if x == at {
				n++
			}
		}
		if n != tc.BurstSize {
			t.Errorf("%d requests at %s, want a burst of %d", n, at, tc.BurstSize)
		}
		bursts += n
	}
	poisson := len(a) - bursts
	if poisson < 400 || poisson > 600 { // 500 expected; 4.5 standard deviations either side
		t.Errorf("%d Poisson arrivals in 100 s at 5/s", poisson)
	}
	if a[len(a)-1] >= 100*time.Second || a[0] < 0 {
		t.Errorf("arrivals outside the trace: %s .. %s", a[0], a[len(a)-1])
	}
	tc.Seed = 8
	if slices.Equal(a, Arrivals(tc)) {
		t.Error("another seed gave the same arrivals")
	}
	if got := Arrivals(TraceConfig{Seconds: 10, BurstSize: 2, BurstEvery: 4}); !slices.Equal(got, []time.Duration{2 * time.Second, 2 * time.Second, 6 * time.Second, 6 * time.Second}) {
		t.Errorf("bursts only: %v", got)
	}
}

// Rows group by function, concurrency and mode, and time only the
// requests the mode's path served.
func TestRows(t *testing.T) {
	samples := []Sample{
		{Function: "hello", Mode: ModeWarm, Concurrency: 1, Served: "warm", ClientMS: 5},
		{Function: "hello", Mode: ModeHit, Concurrency: 4, Served: "ready", ClientMS: 10, TotalMS: 8},
		{Function: "hello", Mode: ModeHit, Concurrency: 4, Served: "cold", ClientMS: 500, TotalMS: 490},
		{Function: "hello", Mode: ModeHit, Concurrency: 4, Served: "ready", ClientMS: 20, TotalMS: 18},
		{Function: "hello", Mode: ModeHit, Concurrency: 1, Served: "ready", ClientMS: 7, TotalMS: 6},
		{Function: "hello", Mode: ModeKept, Concurrency: 1, Served: "cold", ClientMS: 400},
		{Function: "aaa", Mode: ModeMiss, Concurrency: 1, Served: "cold", ClientMS: 300, TotalMS: 290},
	}
	rows := Rows(samples)
	var got []string
	for _, r := range rows {
		got = append(got, r.Function+"/"+r.Mode+"/"+string(rune('0'+r.Concurrency)))
	}
	want := []string{"aaa/" + ModeMiss + "/1", "hello/" + ModeHit + "/1", "hello/" + ModeKept + "/1", "hello/" + ModeWarm + "/1", "hello/" + ModeHit + "/4"}
	if !slices.Equal(got, want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	hit4 := rows[4]
	if hit4.Served != 2 || hit4.All != 3 || hit4.Client.Median != 15 || hit4.Total.Median != 13 {
		t.Fatalf("hits at 4: %+v", hit4)
	}
	if kept := rows[2]; kept.Served != 0 || kept.All != 1 || kept.Client.N != 0 {
		t.Fatalf("keep-alive served by restores only: %+v", kept)
	}
	res := &Result{Functions: []string{"aaa", "hello"}, Concurrency: []int{1, 4}, Rounds: 1, Samples: samples, Rows: rows}
	md := res.Markdown()
	for _, want := range []string{"| hello | 4 | ready hit | 2/3 | 15.0 |", "| hello | 1 | keep-alive | 0/1 | - |"} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	figs := res.Figures()
	if svg := figs["fresh-hello-latency.svg"]; !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "concurrency 4 / ready hit: 15<") {
		t.Errorf("latency figure: %.200s", svg)
	}
}

// A trace's summary: hits of the requests served, ready clones and the
// memory the daemon counted them over the samples, demand as the requests'
// time over the run.
func TestTraceSummary(t *testing.T) {
	tr := TraceResult{Trace: TraceConfig{Seconds: 2},
		Requests: []TraceRequest{{AtMS: 0, ClientMS: 500, Served: "ready"}, {AtMS: 100, ClientMS: 1000, Served: "cold"},
			{AtMS: 1000, ClientMS: 500, Served: "ready"}, {AtMS: 1500, ClientMS: 10, Served: "error"}},
		Ready: []ReadySample{{Clones: 0}, {Clones: 1, MiB: 38}, {Clones: 2, MiB: 70}, {Clones: 1, MiB: 32}}}
	tr.Summarize()
	s := tr.TraceSummary
	if s.Hits != 2 || s.Served != 3 || s.Errors != 1 || math.Abs(s.HitRate-2.0/3) > 1e-9 {
		t.Fatalf("counts %+v", s)
	}
	if s.MeanReady != 1 || s.MeanReadyMiB != 35 { // (38+70+32)/4, not a clone's size times the clones
		t.Fatalf("ready %+v", s)
	}
	if s.LengthS != 2 || s.MeanDemand != 1 { // 2000 ms of requests over 2 s
		t.Fatalf("demand %+v", s)
	}
	tr.Requests = append(tr.Requests, TraceRequest{AtMS: 1900, ClientMS: 1100, Served: "ready"}) // runs past the trace's end
	tr.Summarize()
	if tr.LengthS != 3 || math.Abs(tr.MeanDemand-3100.0/3000) > 1e-9 {
		t.Fatalf("a request past the end: %+v", tr.TraceSummary)
	}
}
