package triggers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/wire"
)

// A cluster: three real NATS servers with JetStream, routed to each
// other on loopback, and two thaw nodes connected to them.

// natsCluster starts three clustered JetStream servers and answers the
// clients' URL.
func natsCluster(t *testing.T) string {
	t.Helper()
	var clientPorts, routePorts [3]int
	for i := range 3 {
		clientPorts[i], routePorts[i] = tcptest.FreePort(t), tcptest.FreePort(t)
	}
	var routes []*url.URL
	for _, p := range routePorts {
		routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
	}
	var urls []string
	for i := range 3 {
		opts := &server.Options{ServerName: fmt.Sprintf("s%d", i+1), Host: "127.0.0.1", Port: clientPorts[i], JetStream: true,
			StoreDir: t.TempDir(), NoSigs: true, NoLog: true, Routes: routes,
			Cluster: server.ClusterOpts{Name: "thaw-test", Host: "127.0.0.1", Port: routePorts[i]}}
		s, err := server.NewServer(opts)
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %d did not start", i+1)
		}
		urls = append(urls, s.ClientURL())
	}
	return strings.Join(urls, ",")
}

// openNode opens a thaw node on the cluster, retrying while JetStream
// elects its leaders.
func openNode(t *testing.T, urls, name string, inv Invoker) *Triggers {
	t.Helper()
	cfg := Config{NATSURL: urls, Replicas: 3, NodeName: name, LeaseTTL: 2 * time.Second, AckWait: 2 * time.Second,
		Backoff: 100 * time.Millisecond, DataDir: t.TempDir()}
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		tr, err := Open(ctx, cfg, inv, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("node", name))
		cancel()
		if err == nil {
			return tr
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: %v", name, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// crash stops a node as a kill would: its connection drops first, so it
// releases nothing (no lease, no message).
func crash(tr *Triggers) {
	tr.e.nc.Close()
	tr.Close()
}

func TestClusterScheduleFiresOnceAcrossNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("a NATS cluster: 30 s")
	}
	urls := natsCluster(t)
	invA, invB := newTestInvoker(), newTestInvoker()
	invA.set("tick", echo)
	invB.set("tick", echo)
	a, b := openNode(t, urls, "node-a", invA), openNode(t, urls, "node-b", invB)
	a.Start(context.Background())
	b.Start(context.Background())
	t.Cleanup(b.Close)
	waitFor(t, 15*time.Second, "a schedules leader", func() bool { return a.Leading() || b.Leading() })
	if a.Leading() && b.Leading() {
		t.Fatal("two leaders")
	}
	leader, follower, leaderName := a, b, "node-a"
	if b.Leading() {
		leader, follower, leaderName = b, a, "node-b"
	}
	if _, err := leader.CreateSchedule(context.Background(), wire.Schedule{Name: "each-second", Function: "tick", Cron: "* * * * * *"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	before := len(invA.callsOf("tick")) + len(invB.callsOf("tick"))
	crash(leader)
	t.Logf("crashed %s, the schedules' leader, after %d firings", leaderName, before)
	waitFor(t, 10*time.Second, "the other node takes the lease", follower.Leading)
	time.Sleep(6 * time.Second)
	ticks := append(scheduleTicks(invA, "tick"), scheduleTicks(invB, "tick")...)
	seen := map[string]int{}
	for _, tk := range ticks {
		seen[tk]++
		if seen[tk] > 1 {
			t.Fatalf("tick %s fired twice: %v", tk, ticks)
		}
	}
	after := len(ticks) - before
	if before < 5 || after < 5 {
		t.Fatalf("%d firings before the crash, %d after: %v", before, after, ticks)
	}
	t.Logf("%d firings in all, none twice; %d after the takeover", len(ticks), after)
}

func TestClusterRedeliversAfterNodeDies(t *testing.T) {
	if testing.Short() {
		t.Skip("a NATS cluster")
	}
	urls := natsCluster(t)
	invA, invB := newTestInvoker(), newTestInvoker()
	hold := make(chan struct{})
	defer close(hold)
	invA.set("work", func(json.RawMessage) (*wire.Invocation, error) { <-hold; return nil, context.Canceled })
	invB.set("work", ok(`"done by b"`))
	a, b := openNode(t, urls, "node-a", invA), openNode(t, urls, "node-b", invB)
	t.Cleanup(b.Close)
	a.Start(context.Background())
	acc, err := b.Enqueue(context.Background(), EnqueueRequest{Function: "work", Event: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "node a running it", func() bool { return len(invA.callsOf("work")) == 1 })
	go crash(a) // its invocation never returns: as if the node died in it
	b.Start(context.Background())
	st := waitDone(t, b, acc.ID, 20*time.Second)
	if st.State != wire.AsyncSucceeded || len(invB.callsOf("work")) != 1 || st.Attempts != 2 {
		t.Fatalf("after node a died: %+v, node b ran it %d times", st, len(invB.callsOf("work")))
	}
}
