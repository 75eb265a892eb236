package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// onlySnapshot creates function name from the bundled functions/name
// (the daemon's default size), boots and snapshots it, and deletes the
// booted VM: the snapshot is all that is left of it.
func onlySnapshot(t *testing.T, ctx context.Context, c *client.Client, name string) *client.Snapshot {
	t.Helper()
	if _, err := c.CreateFunctionFromDir(ctx, name, repoPath("functions/"+name), 0, 0); err != nil {
		t.Fatal(err)
	}
	vm, snap := snapshotBoot(t, c, name)
	if err := c.DeleteVM(ctx, vm.ID); err != nil {
		t.Fatal(err)
	}
	return snap
}

// The bundled hello, request to answer, in one run and one daemon: a ready
// clone's hit, a cold restore (naming the snapshot bypasses the ready
// clones), keep-alive reuse and a warm call, N of each, sequential
// (concurrency 1). A measurement: it prints, asserts nothing about
// latency (the machine is shared). THAW_READY_N sets N (default 15).
func TestReadyClonesMeasure(t *testing.T) {
	measuring(t)
	n := 15
	n = envNumber("THAW_READY_N", n)
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.Ready = daemon.ReadyConfig{MemoryMiB: 1024}
	})
	ctx := ctxT(t)
	if _, err := e.c.CreateFunctionFromDir(ctx, "hello", repoPath("functions/hello"), 0, 0); err != nil {
		t.Fatal(err)
	}
	vm, snap := snapshotBoot(t, e.c, "hello")
	invoke := func(what string, call func() (*client.Invocation, error)) *client.Invocation {
		t.Helper()
		inv, err := call()
		if err != nil || !inv.OK {
			t.Fatalf("%s: %v %+v", what, err, inv)
		}
		return inv
	}
	var hit, renew, cold, kept, warm []float64
	parts := hitParts{}
	byName := func() (*client.Invocation, error) {
		return e.c.InvokeFunction(ctx, "hello", ev(`{"name":"bench"}`), client.InvokeOptions{})
	}
	invoke("first", byName) // a miss: its traffic makes the daemon keep a clone
	for range n {
		waitReadyClone(t, ctx, e.c)
		time.Sleep(200 * time.Millisecond) // let the refill's VMM settle, as between requests that arrive apart
		sent := time.Now()
		inv := invoke("hit", byName)
		if inv.Mode != "ready" {
			t.Fatalf("mode %s with a ready clone waiting", inv.Mode)
		}
		hit = append(hit, inv.Timing.TotalMS)
		renew = append(renew, inv.Timing.Ready.RenewMS)
		parts.add(inv, time.Since(sent))
	}
	for range n {
		inv := invoke("cold", func() (*client.Invocation, error) {
			return e.c.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		cold = append(cold, inv.Timing.TotalMS)
	}
	for range n {
		inv := invoke("warm", func() (*client.Invocation, error) {
			return e.c.InvokeVM(ctx, vm.ID, ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		warm = append(warm, inv.Timing.TotalMS)
	}
	// Keep-alive reuse: the VMs kept after the hits serve when no ready
	// clone is waiting; delete the ready ones and invoke at once.
	for range n {
		vms, err := e.c.ListVMs(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vms {
			if v.State == "ready" {
				e.c.DeleteVM(ctx, v.ID)
			}
		}
		inv := invoke("kept", byName)
		if inv.Mode == "pooled" {
			kept = append(kept, inv.Timing.TotalMS)
		}
	}
	t.Logf("hello, request to answer, p50 ms (n): ready hit %.2f (%d; renewal %.2f), cold restore %.2f (%d), keep-alive %.2f (%d), warm %.2f (%d)",
		median(hit), len(hit), median(renew), median(cold), len(cold), median(kept), len(kept), median(warm), len(warm))
	parts.log(t)
	t.Logf("ready hits %v", hit)
	t.Logf("cold %v", cold)
	t.Logf("keep-alive %v", kept)
	t.Logf("warm %v", warm)
}

// countReady is how many ready clones c has.
func countReady(t *testing.T, ctx context.Context, c *client.Client) int {
	t.Helper()
	vms, err := c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, v := range vms {
		if v.State == "ready" {
			n++
		}
	}
	return n
}

// burst runs c calls at once and returns each one's request-to-answer
// time and mode.
func burst(t *testing.T, c int, call func() (*client.Invocation, error)) (ms []float64, modes map[string]int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	modes = map[string]int{}
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv, err := call()
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !inv.OK {
				t.Errorf("burst: %v %+v", err, inv)
				return
			}
			ms = append(ms, inv.Timing.TotalMS)
			modes[inv.Mode]++
		}()
	}
	wg.Wait()
	return ms, modes
}

// Bursts of THAW_READY_C (default 4) concurrent requests of hello, in one
// daemon that keeps that many ready clones (--min-ready): ready hits,
// cold restores and warm calls on as many running VMs, THAW_READY_N
// bursts (default 5) of each. A measurement: it prints.
func TestReadyClonesMeasureConcurrent(t *testing.T) {
	measuring(t)
	c, rounds := 4, 5
	c = envNumber("THAW_READY_C", c)
	rounds = envNumber("THAW_READY_N", rounds)
	e := startEnvWith(t, t.TempDir(), func(cfg *daemon.Config) {
		cfg.KeepAlive = -1
		cfg.Ready = daemon.ReadyConfig{MemoryMiB: c * (256 + daemon.DefaultVMMemoryOverheadMiB), MinReady: c, Fills: 2}
	})
	ctx := ctxT(t)
	snap := onlySnapshot(t, ctx, e.c, "hello")
	byName := func() (*client.Invocation, error) {
		return e.c.InvokeFunction(ctx, "hello", ev(`{"name":"bench"}`), client.InvokeOptions{})
	}
	if _, err := byName(); err != nil { // its traffic makes the daemon keep clones
		t.Fatal(err)
	}
	var hit, cold, warm []float64
	hits := 0
	var refill []float64
	for range rounds {
		t0 := time.Now()
		for countReady(t, ctx, e.c) < c {
			if time.Since(t0) > 5*time.Minute {
				t.Fatalf("%d ready clones after 5 minutes, want %d", countReady(t, ctx, e.c), c)
			}
			time.Sleep(50 * time.Millisecond)
		}
		refill = append(refill, float64(time.Since(t0).Milliseconds()))
		time.Sleep(300 * time.Millisecond)
		ms, modes := burst(t, c, byName)
		hit = append(hit, ms...)
		hits += modes["ready"]
	}
	logReadyCloneMemory(t, ctx, e, c)
	for range rounds {
		ms, _ := burst(t, c, func() (*client.Invocation, error) {
			return e.c.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		cold = append(cold, ms...)
	}
	running := restoreRunning(t, ctx, e, snap, c)
	for range rounds {
		var i atomic.Int32
		ms, _ := burst(t, c, func() (*client.Invocation, error) {
			return e.c.InvokeVM(ctx, running[int(i.Add(1)-1)%len(running)], ev(`{"name":"bench"}`), client.InvokeOptions{})
		})
		warm = append(warm, ms...)
	}
	t.Logf("hello, concurrency %d, request to answer, p50 ms: ready %.2f (%d of %d requests hit), cold restore %.2f, warm %.2f; %d clones refilled in p50 %.0f ms (from a burst's end to all ready)",
		c, median(hit), hits, len(hit), median(cold), median(warm), c, median(refill[1:]))
	t.Logf("ready %v", hit)
	t.Logf("cold %v", cold)
	t.Logf("warm %v", warm)
	t.Logf("refill ms %v", refill)
}

// logReadyCloneMemory waits for c ready clones and logs what each holds:
// its VMM process's memory.
func logReadyCloneMemory(t *testing.T, ctx context.Context, e *env, c int) {
	t.Helper()
	for countReady(t, ctx, e.c) < c {
		time.Sleep(50 * time.Millisecond)
	}
	var rss, pss, anon []float64
	vms, err := e.c.ListVMs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State != "ready" {
			continue
		}
		m, err := e.c.VMMemory(ctx, v.ID)
		if err != nil {
			t.Fatal(err)
		}
		rss, pss, anon = append(rss, float64(m.RSSBytes>>20)), append(pss, float64(m.PSSBytes>>20)), append(anon, float64(m.AnonBytes>>20))
	}
	t.Logf("ready clones' VMM memory, MiB: rss %v, pss %v, anon %v", rss, pss, anon)
}

// restoreRunning restores c running VMs from snap and returns their ids.
func restoreRunning(t *testing.T, ctx context.Context, e *env, snap *client.Snapshot, c int) []string {
	t.Helper()
	var running []string
	for range c {
		v, err := e.c.RestoreVM(ctx, snap.ID, "")
		if err != nil {
			t.Fatal(err)
		}
		running = append(running, v.ID)
	}
	return running
}

// A synthetic trace: Poisson arrivals of the bundled sleep function, whose
// handler waits THAW_READY_SLEEP_S seconds (default 2: long enough for the
// concurrent demand to matter beside one clone), THAW_READY_RATE a second
// (default 1) for THAW_READY_TRACE_S seconds (default 60), with a burst of
// 4 requests at once every 20 s, each request sent when it arrives. It
// prints the share of requests a ready clone served against the ready
// clones kept and the memory they counted (sampled every 200 ms) and the
// mean concurrent demand (the sum of request times over the run's
// length). A measurement: it prints.
func TestReadyClonesMeasureTrace(t *testing.T) {
	measuring(t)
	rate, secs, sleepS := 1.0, 60, 2.0
	rate = envNumber("THAW_READY_RATE", rate)
	sleepS = envNumber("THAW_READY_SLEEP_S", sleepS)
	secs = envNumber("THAW_READY_TRACE_S", secs)
	e := startEnvWith(t, t.TempDir(), func(cfg *daemon.Config) {
		cfg.KeepAlive = -1
		cfg.Ready = daemon.ReadyConfig{MemoryMiB: 8 * (256 + daemon.DefaultVMMemoryOverheadMiB), Fills: 2}
	})
	ctx := ctxT(t)
	onlySnapshot(t, ctx, e.c, "sleep")
	event := ev(fmt.Sprintf(`{"seconds":%g}`, sleepS))
	arrivals := traceArrivals(rate, secs)
	stopSampling := sampleReady(t, ctx, e)
	var mu sync.Mutex
	var wg sync.WaitGroup
	var busyMS, hitMS, missMS []float64
	modes := map[string]int{}
	start := time.Now()
	for _, at := range arrivals {
		time.Sleep(time.Until(start.Add(at)))
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv, err := e.c.InvokeFunction(ctx, "sleep", event, client.InvokeOptions{})
			mu.Lock()
			defer mu.Unlock()
			if err != nil || !inv.OK {
				t.Errorf("trace request: %v %+v", err, inv)
				return
			}
			modes[inv.Mode]++
			busyMS = append(busyMS, inv.Timing.TotalMS)
			if inv.Mode == "ready" {
				hitMS = append(hitMS, inv.Timing.TotalMS)
			} else {
				missMS = append(missMS, inv.Timing.TotalMS)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	samples, readySum, memSum := stopSampling()
	sum := 0.0
	for _, v := range busyMS {
		sum += v
	}
	demand := sum / float64(elapsed.Milliseconds())
	kept := float64(readySum) / float64(max(samples, 1))
	t.Logf("trace: %d requests of %g s in %.0f s (Poisson %.1f/s, bursts of 4 every 20 s): %d hits (%.1f%%), modes %v; hit p50 %.1f ms, miss p50 %.1f ms",
		len(arrivals), sleepS, elapsed.Seconds(), rate, modes["ready"], 100*float64(modes["ready"])/float64(len(arrivals)), modes, median(hitMS), median(missMS))
	t.Logf("trace: ready clones kept, mean %.2f; mean concurrent demand %.3f requests; %.2f clones per concurrent request", kept, demand, kept/demand)
	t.Logf("trace: standby memory counted, mean %.0f MiB (%.1f MiB a clone)", float64(memSum)/float64(max(samples, 1)), float64(memSum)/float64(max(readySum, 1)))
}

// traceArrivals are the trace's arrival times: Poisson arrivals at rate
// a second for secs seconds (the same in every run), and a burst of 4 at
// once every 20 s from 10 s on, in order.
func traceArrivals(rate float64, secs int) []time.Duration {
	rng := rand.New(rand.NewPCG(1, 2)) // the same arrivals in every run
	var arrivals []time.Duration
	for at := time.Duration(0); at < time.Duration(secs)*time.Second; {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		arrivals = append(arrivals, at)
	}
	for b := 10 * time.Second; b < time.Duration(secs)*time.Second; b += 20 * time.Second {
		for range 4 {
			arrivals = append(arrivals, b)
		}
	}
	slices.Sort(arrivals)
	return arrivals
}

// sampleReady counts e's ready clones and reads the memory they count
// every 200 ms until the function it returns is called, which returns the
// number of samples and the sums of the counts and of the memory (MiB).
func sampleReady(t *testing.T, ctx context.Context, e *env) func() (int, int, int) {
	stop := make(chan struct{})
	var samples, readySum, memSum int
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			readySum += countReady(t, ctx, e.c)
			memSum += gauge(t, e, "thaw_ready_clones_memory_mib")
			samples++
		}
	}()
	return func() (int, int, int) {
		close(stop)
		<-sampled
		return samples, readySum, memSum
	}
}

// gauge is the value of the daemon's metric name (no labels).
func gauge(t *testing.T, e *env, name string) int {
	t.Helper()
	families, err := e.svc.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return int(f.GetMetric()[0].GetGauge().GetValue())
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// measuring skips a measurement unless THAW_READY_MEASURE=1: make test runs
// the ready clones' behaviour (ready_test.go), not their timings.
func measuring(t *testing.T) {
	t.Helper()
	if os.Getenv("THAW_READY_MEASURE") != "1" {
		t.Skip("a measurement: set THAW_READY_MEASURE=1 (and THAW_IMAGE)")
	}
}

// hitParts collects where ready hits' time went.
type hitParts map[string][]float64

func (p hitParts) add(inv *client.Invocation, client time.Duration) {
	r := inv.Timing.Ready
	p["client"] = append(p["client"], float64(client.Microseconds())/1000)
	p["total"] = append(p["total"], inv.Timing.TotalMS)
	p["take"] = append(p["take"], r.TakeMS)
	p["renew"] = append(p["renew"], r.RenewMS)
	p["renew guest"] = append(p["renew guest"], r.RenewGuestMS)
	p["invoke"] = append(p["invoke"], inv.Timing.InvokeMS)
	p["handler"] = append(p["handler"], inv.Timing.GuestMS)
	p["rest"] = append(p["rest"], inv.Timing.TotalMS-r.TakeMS-r.RenewMS-inv.Timing.InvokeMS)
	p["teardown"] = append(p["teardown"], inv.Timing.TeardownMS)
	p["client - total"] = append(p["client - total"], float64(client.Microseconds())/1000-inv.Timing.TotalMS)
	for step, v := range r.RenewSteps {
		p["renew step "+step] = append(p["renew step "+step], v)
	}
}

// log prints each part's p50, in a stable order.
func (p hitParts) log(t *testing.T) {
	t.Helper()
	names := make([]string, 0, len(p))
	for k := range p {
		names = append(names, k)
	}
	slices.Sort(names)
	line := ""
	for _, k := range names {
		line += fmt.Sprintf("%s %.2f; ", k, median(p[k]))
	}
	t.Logf("ready hit parts, p50 ms: %s", line)
}
