package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/cluster"
	"github.com/thaw-dev/thaw/wire"
)

// The triggers on a cluster of real thawd processes sharing a NATS
// cluster (three nats-server processes): a schedule and queued
// invocations live through a kill -9 of the node that fires the schedule.

// tickHandler reports every execution to the counter at addr: an
// asynchronous event's "id", or a schedule firing's schedule and tick
// (the default event of a schedule), so the test sees each tick's runs.
const tickHandler = `import socket
import time

COUNTER = (%q, %s)


def handle(event):
    key = event.get("id") or "%%s@%%s" %% (event["schedule"], event["time"])
    with socket.create_connection(COUNTER, timeout=5) as s:
        s.sendall((key + "\n").encode())
        s.shutdown(socket.SHUT_WR)
        s.recv(16)
    time.sleep(float(event.get("seconds", 0)))
    return {"key": key}
`

// nodeMetric reads one unlabelled metric of a node over its Unix socket
// (-1 when the node does not answer).
func nodeMetric(n *cluster.Node, name string) float64 {
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", n.Socket())
		}}}
	resp, err := hc.Get("http://thawd/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var v float64
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				return v
			}
		}
	}
	return -1
}

// ticksOf lists the schedule's ticks the counter saw, with their runs.
func ticksOf(c *counter, schedule string) map[time.Time]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[time.Time]int{}
	for k, n := range c.seen {
		if s, ok := strings.CutPrefix(k, schedule+"@"); ok {
			if tk, err := time.Parse(time.RFC3339, s); err == nil {
				out[tk] = n
			}
		}
	}
	return out
}

// leaderOf waits for the node that fires the schedules.
func leaderOf(t *testing.T, nodes []*cluster.Node, within time.Duration) *cluster.Node {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		for _, n := range nodes {
			if nodeMetric(n, "thaw_schedules_leader") == 1 {
				return n
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("no node took the schedules' lease within %s", within)
	return nil
}

// TestClusterTriggersSurviveNodeKill: two thawd nodes on a three-server
// NATS cluster. A 1-second schedule fires on one node; queued invocations
// run on both. The schedule's node is killed (SIGKILL to thawd and its
// VMs): the other node takes the schedules' lease and fires on, every
// tick after the kill runs once, and every queued invocation completes
// (those the dead node was running are redelivered).
func TestClusterTriggersSurviveNodeKill(t *testing.T) {
	parallel(t)
	natsBin := cluster.DefaultNATS()
	if _, err := os.Stat(natsBin); err != nil {
		t.Fatalf("nats-server (scripts/install-deps.sh builds it; THAW_NATS names another): %v", err)
	}
	c, ctr := countingCluster(t, 2, func(cfg *cluster.Config) {
		cfg.NATS = &cluster.NATSConfig{Binary: natsBin, Servers: 3}
		cfg.Node.Args = append(cfg.Node.Args, "--async-ack-wait", "6s")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	host, port, _ := net.SplitHostPort(ctr.addr)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte(fmt.Sprintf(tickHandler, host, port)), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := cluster.Function{Name: "tick", Dir: dir, MemoryMiB: 256, Services: []string{ctr.addr}}
	if err := c.Deploy(ctx, fn); err != nil {
		t.Fatal(err)
	}
	first := c.NodeClient(c.Nodes[0])
	if _, err := first.SetAsyncConfig(ctx, fn.Name, client.AsyncConfigRequest{Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	if _, err := first.CreateSchedule(ctx, client.CreateScheduleRequest{Name: "every-second", Function: fn.Name, Cron: "* * * * * *"}); err != nil {
		t.Fatal(err)
	}
	leader := leaderOf(t, c.Nodes, 20*time.Second)
	waitFor(t, 90*time.Second, "5 firings run", func() bool { return len(ticksOf(ctr, "every-second")) >= 5 })

	// Queued invocations, some of them running on the leader when it dies.
	var ids []string
	for i := range 8 {
		ev, _ := json.Marshal(map[string]any{"id": fmt.Sprintf("queued-%d", i), "seconds": 3})
		acc, err := c.NodeClient(leader).InvokeFunctionAsync(ctx, fn.Name, ev, "")
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, acc.ID)
	}
	waitFor(t, 60*time.Second, "queued invocations running", func() bool {
		started := 0
		for i := range ids {
			started += min(ctr.count(fmt.Sprintf("queued-%d", i)), 1)
		}
		return started >= 3
	})
	var survivor *cluster.Node
	for _, n := range c.Nodes {
		if n != leader {
			survivor = n
		}
	}
	killed := time.Now()
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Logf("killed %s, the schedules' leader; %d ticks ran before", leader.Name, len(ticksOf(ctr, "every-second")))
	if n := leaderOf(t, []*cluster.Node{survivor}, 20*time.Second); n != survivor {
		t.Fatal("the survivor did not take the lease")
	}
	t.Logf("%s leads %s after the kill", survivor.Name, time.Since(killed).Round(time.Millisecond))
	time.Sleep(10 * time.Second)
	if _, err := c.NodeClient(survivor).PauseSchedule(ctx, "every-second", true); err != nil {
		t.Fatal(err)
	}

	checkQueuedAfterKill(t, ctx, c.NodeClient(survivor), ctr, ids)
	waitFor(t, 2*time.Minute, "the firings' invocations done", func() bool { return nodeMetric(survivor, "thaw_async_queue_depth") == 0 })
	checkTicksAfterKill(t, ctr, "every-second", killed)
}

// checkQueuedAfterKill: every queued invocation succeeded and ran at
// least once; it reports those attempted again after the kill.
func checkQueuedAfterKill(t *testing.T, ctx context.Context, sc *client.Client, ctr *counter, ids []string) {
	t.Helper()
	waitFor(t, 3*time.Minute, "every queued invocation done", func() bool {
		for _, id := range ids {
			st, err := sc.GetAsync(ctx, id)
			if err != nil || (st.State != wire.AsyncSucceeded && st.State != wire.AsyncFailed) {
				return false
			}
		}
		return true
	})
	twice, again := 0, 0
	for i, id := range ids {
		st, _ := sc.GetAsync(ctx, id)
		runs := ctr.count(fmt.Sprintf("queued-%d", i))
		if st.State != wire.AsyncSucceeded || runs < 1 {
			t.Errorf("%s: %s after %d attempts, ran %d times (%s)", id, st.State, st.Attempts, runs, st.Error)
		}
		if runs > 1 {
			twice++
		}
		if st.Attempts > 1 {
			again++
		}
	}
	t.Logf("%d queued invocations all succeeded; %d attempted again after the kill, %d of them ran twice (in flight on the killed node)",
		len(ids), again, twice)
}

// checkTicksAfterKill: every tick after the kill ran once (one node was
// left), enough of them ran, and before it only the few in flight on the
// killed node ran twice.
func checkTicksAfterKill(t *testing.T, ctr *counter, schedule string, killed time.Time) {
	t.Helper()
	ticks := ticksOf(ctr, schedule)
	var after, redelivered []time.Time
	for tk, runs := range ticks {
		if tk.After(killed) {
			after = append(after, tk)
			if runs != 1 {
				t.Errorf("tick %s ran %d times, after the kill (one node alive)", tk.Format(time.RFC3339), runs)
			}
		} else if runs > 1 {
			redelivered = append(redelivered, tk)
		}
	}
	sort.Slice(after, func(i, j int) bool { return after[i].Before(after[j]) })
	if len(after) < 3 {
		t.Fatalf("%d ticks ran after the kill: %v", len(after), after)
	}
	if len(redelivered) > 4 { // at most the function's concurrency was in flight on the dead node
		t.Errorf("%d ticks before the kill ran twice: %v", len(redelivered), redelivered)
	}
	t.Logf("%d ticks in all; %d after the kill (first %s after it), %d before it ran again (in flight on the killed node)",
		len(ticks), len(after), after[0].Sub(killed).Round(time.Millisecond), len(redelivered))
}
