package e2e

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
)

// A burst of 64 concurrent cold invocations on this 2-core host: each
// one either answers correctly or gets 429 (the admission queue full, or
// no room in time), no VM is killed for memory, and the daemon keeps
// answering GET /v1/info quickly meanwhile.
func TestBurstAdmission(t *testing.T) {
	const burst = 64
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) {
		c.MaxVMs, c.AdmissionQueue, c.AdmissionTimeout = 4, 16, 20*time.Second
	})
	c := e.c
	snap := probeSnapshot(t, c)
	ctx := ctxT(t)
	oomBefore := oomKills(t)
	logBefore := kernelOOMLines(t)

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		ok, busy int
		other    []error
	)
	infoLatencies := pollInfo(t, c, ctx)
	start := time.Now()
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inv, err := c.InvokeSnapshot(ctx, snap.ID, ev(`{"name":"burst"}`), client.InvokeOptions{})
			mu.Lock()
			defer mu.Unlock()
			var ae *client.APIError
			switch {
			case err == nil && inv.OK && strings.Contains(string(inv.Result), "hello, burst!"):
				ok++
			case errors.As(err, &ae) && ae.Status == 429:
				busy++
			default:
				other = append(other, errors.Join(err, errors.New(string(inv.Result))))
				_ = i
			}
		}()
	}
	wg.Wait()
	lat := infoLatencies()
	elapsed := time.Since(start)
	for _, err := range other {
		t.Errorf("neither an answer nor 429: %v", err)
	}
	if ok == 0 || ok+busy != burst {
		t.Fatalf("%d answered, %d got 429, of %d", ok, busy, burst)
	}
	checkNothingKilled(t, e, c, oomBefore, logBefore)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) == 0 {
		t.Fatal("no info request was made during the burst")
	}
	p99 := lat[(len(lat)*99)/100]
	t.Logf("%d cold invocations at once: %d answered, %d got 429, in %s; GET /v1/info p50 %s p99 %s over %d requests",
		burst, ok, busy, elapsed.Round(time.Millisecond), lat[len(lat)/2], p99, len(lat))
	if p99 > 100*time.Millisecond {
		t.Errorf("GET /v1/info p99 %s during the burst, want under 100 ms", p99)
	}
}

// pollInfo asks GET /v1/info every 25 ms, checking each answer, until the
// function it returns is called, which returns the latencies.
func pollInfo(t *testing.T, c *client.Client, ctx context.Context) func() []time.Duration {
	stopInfo := make(chan struct{})
	infoDone := make(chan []time.Duration)
	go func() {
		var lat []time.Duration
		tick := time.NewTicker(25 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopInfo:
				infoDone <- lat
				return
			case <-tick.C:
			}
			t0 := time.Now()
			if _, err := c.Info(ctx); err != nil {
				t.Errorf("info during the burst: %v", err)
			}
			lat = append(lat, time.Since(t0))
		}
	}()
	return func() []time.Duration {
		close(stopInfo)
		return <-infoDone
	}
}

// checkNothingKilled checks nothing was killed for memory during the
// burst: no VM failed, and the kernel's OOM killer killed nothing of this
// daemon's.
func checkNothingKilled(t *testing.T, e *env, c *client.Client, oomBefore int64, logBefore []string) {
	t.Helper()
	vms, err := c.ListVMs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vms {
		if v.State == "failed" {
			t.Errorf("vm %s failed: %s", v.ID, v.Reason)
		}
	}
	// Nor by the kernel: the OOM killer killed nothing during the burst,
	// for the host's memory or in this daemon's cgroups. (Other tests'
	// VMs at their own memory limit may be killed meanwhile: the machine
	// is shared with them, so the host-wide count alone proves nothing.)
	if n := oomKills(t) - oomBefore; n != 0 {
		for _, l := range kernelOOMLines(t)[len(logBefore):] {
			if !strings.Contains(l, "constraint=CONSTRAINT_MEMCG") || strings.Contains(l, "/"+cgroupName(e.dataDir)+"/") {
				t.Errorf("the OOM killer killed during the burst: %s", l)
			}
		}
	}
}

// oomKills is how many processes the kernel's OOM killer has killed since
// boot (/proc/vmstat oom_kill).
func oomKills(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/vmstat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("/proc/vmstat has no oom_kill")
	return 0
}

// kernelOOMLines are the kernel log's OOM-kill lines so far, oldest first
// (each says what constrained the kill and whose cgroup it was in).
func kernelOOMLines(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("dmesg").Output()
	if err != nil {
		t.Fatalf("dmesg: %v", err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, "oom-kill:") {
			lines = append(lines, l)
		}
	}
	return lines
}
