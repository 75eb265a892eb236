package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/cluster"
)

// counter is a service on the host, at the cluster bridge's address, that
// counts the ids functions report: how many times each invocation ran,
// whichever node ran it.
type counter struct {
	mu   sync.Mutex
	seen map[string]int
	addr string
}

func newCounter(t *testing.T, host string) *counter {
	t.Helper()
	ln, err := net.Listen("tcp4", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := &counter{seen: map[string]int{}, addr: ln.Addr().String()}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				id, err := bufio.NewReader(conn).ReadString('\n')
				if err != nil && id == "" {
					return
				}
				c.mu.Lock()
				c.seen[id[:len(id)-1]]++
				c.mu.Unlock()
				io.WriteString(conn, "ok\n")
			}()
		}
	}()
	return c
}

func (c *counter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seen[id]
}

// countingCluster is startCluster's n nodes and a counter on the host
// they reach.
func countingCluster(t *testing.T, n int, opts ...func(*cluster.Config)) (*cluster.Cluster, *counter) {
	t.Helper()
	c := startCluster(t, n, opts...)
	return c, newCounter(t, c.Net.HostIP.String())
}

// startCluster builds thawd and starts n nodes behind HAProxy, removed
// with the test (also when it fails); opts change the config first.
func startCluster(t *testing.T, n int, opts ...func(*cluster.Config)) *cluster.Cluster {
	t.Helper()
	image := imageDir(t)
	if _, err := exec.LookPath("haproxy"); err != nil {
		t.Fatalf("haproxy is not installed (scripts/install-deps.sh installs it): %v", err)
	}
	if swept, err := cluster.Sweep(); err != nil || len(swept) > 0 {
		t.Logf("removed what dead cluster runs left: %v (%v)", swept, err)
	}
	bin := filepath.Join(t.TempDir(), "thawd")
	if out, err := exec.Command("go", "build", "-o", bin, repoPath("cmd/thawd")).CombinedOutput(); err != nil {
		t.Fatalf("build thawd: %v\n%s", err, out)
	}
	dir, err := os.MkdirTemp("", "thaw-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	var logw io.Writer // each node's log is in its run directory; THAW_CLUSTER_LOG=1 shows them too
	if os.Getenv("THAW_CLUSTER_LOG") != "" {
		logw = os.Stderr
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cfg := cluster.Config{Nodes: n, Dir: dir, Node: cluster.NodeConfig{Thawd: bin, Image: image,
		SnapBPF: repoPath("bin/snapbpf_capture.bpf.o"), Log: logw,
		Args: []string{"--memory", "256", "--shim", repoPath("shim/build/libthaw_shim.so")}}}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := cluster.Start(ctx, cfg, slog.Default())
	if err != nil {
		os.RemoveAll(dir)
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() { // runs after Close: nothing of the cluster is left
		for i := range c.Nodes {
			if _, err := os.Stat("/run/netns/" + c.Net.Namespace(i+1)); err == nil {
				t.Errorf("namespace %s left behind", c.Net.Namespace(i+1))
			}
		}
		if _, err := net.InterfaceByName(c.Net.Bridge); err == nil {
			t.Errorf("bridge %s left behind", c.Net.Bridge)
		}
		if c.Store != nil {
			if _, err := os.Stat("/run/netns/" + c.Net.StoreNamespace()); err == nil {
				t.Errorf("namespace %s left behind", c.Net.StoreNamespace())
			}
			if c.Store.Running() {
				t.Error("the object store is still running")
			}
		}
		for _, n := range c.Nodes {
			if n.Running() {
				t.Errorf("%s still running", n.Name)
			}
		}
	})
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("stop cluster: %v", err)
		}
		if t.Failed() {
			t.Logf("cluster state kept for a look: %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return c
}

// served is one answer through the balancer: the node that sent it.
type served struct {
	node string
	inv  *client.Invocation
	err  error
	took time.Duration
}

// invokeLB invokes fn through HAProxy with the event {id, counter,
// seconds} and reports which node answered.
func invokeLB(ctx context.Context, c *cluster.Cluster, fn, id, counterAddr string, seconds float64) served {
	var node string
	cl := c.Client(client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if resp != nil {
				node = cluster.NodeOf(resp.Header)
			}
			return resp, err
		})
	}))
	ev, _ := json.Marshal(map[string]any{"id": id, "counter": counterAddr, "seconds": seconds})
	t0 := time.Now()
	inv, err := cl.InvokeFunction(ctx, fn, ev, client.InvokeOptions{})
	return served{node: node, inv: inv, err: err, took: time.Since(t0)}
}

// nodeOfLB sends GET path through HAProxy, with a Thaw-Node header if
// node is set, and returns the node that answered.
func nodeOfLB(t *testing.T, c *cluster.Cluster, node, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", c.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+c.Token())
	if node != "" {
		req.Header.Set(api.NodeHeader, node)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s (Thaw-Node %q): %s", path, node, resp.Status)
	}
	return cluster.NodeOf(resp.Header)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// deployCounting deploys the counting function on every node and finds
// the node its invocations go to (they all must).
func deployCounting(t *testing.T, ctx context.Context, c *cluster.Cluster, ctr *counter) (cluster.Function, *cluster.Node, *cluster.Node) {
	t.Helper()
	fn := cluster.Function{Name: "count", Dir: repoPath("e2e/testdata/cluster"), MemoryMiB: 256, Services: []string{ctr.addr}}
	t0 := time.Now()
	if err := c.Deploy(ctx, fn); err != nil {
		t.Fatal(err)
	}
	t.Logf("deployed on %d nodes in %s", len(c.Nodes), time.Since(t0).Round(time.Millisecond))
	var owner string
	for i := 0; i < 5; i++ {
		s := invokeLB(ctx, c, fn.Name, fmt.Sprintf("route-%d", i), ctr.addr, 0)
		if s.err != nil || !s.inv.OK {
			t.Fatalf("invoke %d: %v %+v", i, s.err, s.inv)
		}
		if owner == "" {
			owner = s.node
		}
		if s.node != owner || s.node == "" {
			t.Fatalf("invocation %d ran on %q, earlier ones on %q", i, s.node, owner)
		}
		t.Logf("invocation %d: %s, %s", i, s.node, s.took.Round(time.Millisecond))
	}
	for i := 0; i < 5; i++ {
		if n := ctr.count(fmt.Sprintf("route-%d", i)); n != 1 {
			t.Fatalf("route-%d ran %d times", i, n)
		}
	}
	victim := c.Node(owner)
	for _, n := range c.Nodes {
		if n != victim {
			return fn, victim, n
		}
	}
	t.Fatal("one node only")
	return fn, nil, nil
}

// firstSuccess invokes fn through HAProxy until an invocation succeeds
// and reports it, how long after since it came and how many it took; each
// ran at most once.
func firstSuccess(t *testing.T, ctx context.Context, c *cluster.Cluster, ctr *counter, fn, prefix string, since time.Time) (served, time.Duration) {
	t.Helper()
	var s served
	attempts := 0
	for i := 0; ; i++ {
		attempts++
		s = invokeLB(ctx, c, fn, fmt.Sprintf("%s-%d", prefix, i), ctr.addr, 0)
		if s.err == nil && s.inv.OK {
			break
		}
		if time.Since(since) > 30*time.Second {
			t.Fatalf("no invocation succeeded within 30 s: %v", s.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(since)
	for i := 0; i < attempts; i++ {
		if n := ctr.count(fmt.Sprintf("%s-%d", prefix, i)); n > 1 || (i == attempts-1 && n != 1) {
			t.Fatalf("%s-%d ran %d times", prefix, i, n)
		}
	}
	t.Logf("%d invocation(s) until one succeeded", attempts)
	return s, took
}

// TestClusterPartition: a node that stops answering altogether (its link
// is down: no reset, no answer) loses its functions to another node
// within 5 s, and gets them back when its link returns.
func TestClusterPartition(t *testing.T) {
	parallel(t)
	c, ctr := countingCluster(t, 2)
	ctx := ctxT(t)
	fn, victim, survivor := deployCounting(t, ctx, c, ctr)
	// In flight when the link goes: it must fail within seconds (HAProxy's
	// TCP keepalive towards the node), not after timeout server, and not
	// run twice.
	inflight := make(chan served, 1)
	go func() { inflight <- invokeLB(ctx, c, fn.Name, "in-flight", ctr.addr, 15) }()
	for deadline := time.Now().Add(30 * time.Second); ctr.count("in-flight") == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the in-flight invocation never started")
		}
	}
	cut := time.Now()
	if err := c.Net.SetLink(victim.Index, false); err != nil {
		t.Fatal(err)
	}
	first, took := firstSuccess(t, ctx, c, ctr, fn.Name, "cut", cut)
	t.Logf("partition: first successful invocation %s after the cut, on %s", took.Round(time.Millisecond), first.node)
	if first.node != survivor.Name || took > 5*time.Second {
		t.Errorf("after the cut: %s after, on %q; want %s within 5 s", took, first.node, survivor.Name)
	}
	if err := c.WaitStates(ctx, func(st map[string]string) bool { return st[victim.Name] == "DOWN" }); err != nil {
		t.Fatal(err)
	}
	t.Logf("HAProxy marked %s DOWN %s after the cut", victim.Name, time.Since(cut).Round(time.Millisecond))
	select {
	case s := <-inflight:
		var ae *client.APIError
		if !errors.As(s.err, &ae) || ae.Status < 500 {
			t.Fatalf("the in-flight invocation returned %v (%+v), want a 5xx error", s.err, s.inv)
		}
		t.Logf("in-flight invocation: %d %s after the cut", ae.Status, time.Since(cut).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatalf("the in-flight invocation still waits %s after the cut (its function sleeps 15 s)", time.Since(cut).Round(time.Second))
	}
	if n := ctr.count("in-flight"); n != 1 {
		t.Fatalf("the in-flight invocation ran %d times, want exactly once", n)
	}
	healed := time.Now()
	if err := c.Net.SetLink(victim.Index, true); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitStates(ctx, func(st map[string]string) bool { return st[victim.Name] == "UP" }); err != nil {
		t.Fatal(err)
	}
	t.Logf("HAProxy marked %s UP %s after the link returned", victim.Name, time.Since(healed).Round(time.Millisecond))
	if s := invokeLB(ctx, c, fn.Name, "healed", ctr.addr, 0); s.err != nil || s.node != victim.Name {
		t.Errorf("after healing the function went to %q (%v), want back to %s", s.node, s.err, victim.Name)
	}
	// A node that is alive keeps a long, silent request: the keepalive
	// probes are answered.
	if s := invokeLB(ctx, c, fn.Name, "long", ctr.addr, 9); s.err != nil || !s.inv.OK || s.took < 9*time.Second {
		t.Errorf("a 9 s invocation on a healthy node: %v %+v after %s", s.err, s.inv, s.took)
	}
}

// TestCluster: two nodes in network namespaces behind a real HAProxy.
// A function's invocations all reach one node; when that node is killed
// (thawd and its QEMUs, SIGKILL) the invocation it was running fails and
// ran once, and the next invocation succeeds on the other node within
// 5 s. A node that stops drains: its health turns 503 while it still
// serves.
func TestCluster(t *testing.T) {
	parallel(t)
	c, ctr := countingCluster(t, 2)
	ctx := ctxT(t)
	// Routing: every invocation of the function reaches the same node, and
	// so does any other request about it.
	fn, victim, survivor := deployCounting(t, ctx, c, ctr)
	owner := victim.Name
	checkClusterRouting(t, c, fn, owner)
	// In flight: an invocation is running on the owner when it dies.
	inflight := make(chan served, 1)
	go func() { inflight <- invokeLB(ctx, c, fn.Name, "in-flight", ctr.addr, 30) }()
	deadline := time.Now().Add(30 * time.Second)
	for ctr.count("in-flight") == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the in-flight invocation never started")
		}
		time.Sleep(20 * time.Millisecond)
	}

	killed := time.Now()
	if err := victim.Kill(); err != nil {
		t.Fatalf("kill %s: %v", victim.Name, err)
	}
	first, failover := firstSuccess(t, ctx, c, ctr, fn.Name, "after", killed)
	t.Logf("failover: first successful invocation %s after the kill, on %s (that invocation took %s)",
		failover.Round(time.Millisecond), first.node, first.took.Round(time.Millisecond))
	if first.node != survivor.Name {
		t.Errorf("after the kill the invocation ran on %q, want %s", first.node, survivor.Name)
	}
	if failover > 5*time.Second {
		t.Errorf("failover took %s, want at most 5 s", failover)
	}

	if err := c.WaitStates(ctx, func(st map[string]string) bool { return st[victim.Name] == "DOWN" && st[survivor.Name] == "UP" }); err != nil {
		t.Fatal(err)
	}
	t.Logf("HAProxy marked %s DOWN %s after the kill", victim.Name, time.Since(killed).Round(time.Millisecond))

	s := <-inflight
	var ae *client.APIError
	if s.err == nil || !errors.As(s.err, &ae) || ae.Status < 500 {
		t.Fatalf("the in-flight invocation returned %v (%+v), want a 5xx error", s.err, s.inv)
	}
	t.Logf("in-flight invocation: %d after %s", ae.Status, s.took.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // a retry, had there been one, would have run by now
	if n := ctr.count("in-flight"); n != 1 {
		t.Fatalf("the in-flight invocation ran %d times, want exactly once", n)
	}

	checkDrain(t, ctx, c, survivor)
}

// checkClusterRouting: requests about the function reach its owner, the
// client's Authorization reaches the node, and a Thaw-Node header picks
// the node for any request.
func checkClusterRouting(t *testing.T, c *cluster.Cluster, fn cluster.Function, owner string) {
	t.Helper()
	if got := nodeOfLB(t, c, "", "/v1/functions/"+fn.Name); got != owner {
		t.Errorf("GET /v1/functions/%s went to %q, its invocations to %s", fn.Name, got, owner)
	}
	// The client's Authorization reaches the node, which checks it.
	req, _ := http.NewRequest("GET", c.URL()+"/v1/functions/"+fn.Name, nil)
	req.Header.Set("Authorization", "Bearer wrong")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized || cluster.NodeOf(resp.Header) != owner {
		t.Errorf("a wrong token through the balancer: %v %v, want 401 from %s", resp, err, owner)
	} else {
		resp.Body.Close()
	}
	// A Thaw-Node header picks the node for any request.
	for _, n := range c.Nodes {
		for _, path := range []string{"/v1/info", "/v1/functions/" + fn.Name} {
			if got := nodeOfLB(t, c, n.Name, path); got != n.Name {
				t.Errorf("GET %s with Thaw-Node %s went to %q", path, n.Name, got)
			}
		}
	}
}

// checkDrain: a node that stops answers health 503 draining at once, and
// still serves requests meanwhile.
func checkDrain(t *testing.T, ctx context.Context, c *cluster.Cluster, survivor *cluster.Node) {
	t.Helper()
	stopped := make(chan error, 1)
	go func() { stopped <- survivor.Stop(30 * time.Second) }()
	nc := c.NodeClient(survivor)
	for {
		h, err := nc.Health(ctx)
		if errors.Is(err, client.ErrUnavailable) && h.Status == "draining" {
			if _, err := nc.Info(ctx); err != nil {
				t.Errorf("a draining node must still serve: %v", err)
			}
			break
		}
		if err != nil && !errors.Is(err, client.ErrUnavailable) {
			t.Fatalf("health while stopping: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
}
