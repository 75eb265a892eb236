package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/cluster"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
)

// withStore gives the cluster an object store (the pinned MinIO) behind
// the default emulated link, as every node's registry.
func withStore(t *testing.T) func(*cluster.Config) {
	bin := miniotest.Binary(t)
	return func(cfg *cluster.Config) {
		cfg.Store = &cluster.StoreConfig{MinIO: bin, Link: cluster.DefaultLink, PushOnPrepare: true}
	}
}

// checkLink: the link the cluster measured at its start is the emulated
// one (1 ms round trip, 1 Gbit/s), within what a busy 2-core host allows.
func checkLink(t *testing.T, c *cluster.Cluster) {
	t.Helper()
	lc := c.LinkCheck
	t.Logf("store link %s: requests %.2f ms, %.2f ms past the link: it adds %.2f ms; GET %.0f Mbit/s, PUT %.0f Mbit/s (%d MiB)",
		lc.Link, lc.RTTMedianMS, lc.DirectMedianMS, lc.AddedMS, lc.GetMbit, lc.PutMbit, lc.GetBytes>>20)
	if lc.AddedMS < 0.95 || lc.AddedMS > 3 {
		t.Errorf("the link adds %.2f ms to a request, want about 1", lc.AddedMS)
	}
	if lc.GetMbit > 1050 || lc.PutMbit > 1050 {
		t.Errorf("GET %.0f, PUT %.0f Mbit/s: above the link's 1 Gbit/s", lc.GetMbit, lc.PutMbit)
	}
}

// ownerOf is the node the balancer sends fn's requests to (any answer,
// 404 included, names it).
func ownerOf(t *testing.T, c *cluster.Cluster, fn string) *cluster.Node {
	t.Helper()
	req, _ := http.NewRequest("GET", c.URL()+"/v1/functions/"+fn, nil)
	req.Header.Set("Authorization", "Bearer "+c.Token())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	n := c.Node(cluster.NodeOf(resp.Header))
	if n == nil {
		t.Fatalf("GET /v1/functions/%s: no node named in %v", fn, resp.Header)
	}
	return n
}

// publishCounting publishes the counting function through the registry
// from owner: prepared there, pushed; no other node holds anything of it.
func publishCounting(t *testing.T, ctx context.Context, c *cluster.Cluster, ctr *counter, owner *cluster.Node) cluster.Function {
	t.Helper()
	fn := cluster.Function{Name: "count", Dir: repoPath("e2e/testdata/cluster"), MemoryMiB: 256, Services: []string{ctr.addr}}
	ev, _ := json.Marshal(map[string]any{"id": "record", "counter": ctr.addr, "seconds": 0})
	t0 := time.Now()
	p, err := c.Publish(ctx, fn, owner, ev)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %s from %s in %s (snapshot %s, pushed by the node's push on prepare)", fn.Name, owner.Name,
		time.Since(t0).Round(time.Millisecond), p.Snapshot)
	if p.Push != nil {
		t.Errorf("the node's push on prepare did not store %s; Publish pushed it", p.Snapshot)
	}
	return fn
}

// countingPair starts two nodes with opts and publishes the counting
// function from its owner; other is the node that holds nothing of it.
func countingPair(t *testing.T, opts ...func(*cluster.Config)) (c *cluster.Cluster, ctr *counter, ctx context.Context, owner, other *cluster.Node, fn cluster.Function) {
	t.Helper()
	c, ctr = countingCluster(t, 2, opts...)
	ctx = ctxT(t)
	owner = ownerOf(t, c, "count")
	fn = publishCounting(t, ctx, c, ctr, owner)
	for _, n := range c.Nodes {
		if n != owner {
			other = n
		}
	}
	return c, ctr, ctx, owner, other, fn
}

// TestClusterRegistry: a function prepared on one node and pushed to the
// object store is served by another node that never saw it once the
// first one is killed: the survivor imports it from the registry on that
// first invocation and restores it lazily, and the first success after
// the kill comes within 5 s.
func TestClusterRegistry(t *testing.T) {
	parallel(t)
	c, ctr, ctx, owner, survivor, fn := countingPair(t, withStore(t))
	checkLink(t, c)
	for _, n := range c.Nodes {
		if fns, err := c.NodeClient(n).ListFunctions(ctx); err != nil || (n != owner && len(fns) != 0) {
			t.Fatalf("%s holds %v (%v) before any invocation; want nothing but on %s", n.Name, fns, err, owner.Name)
		}
	}
	for i := 0; i < 3; i++ {
		if s := invokeLB(ctx, c, fn.Name, "before-"+string(rune('a'+i)), ctr.addr, 0); s.err != nil || s.node != owner.Name {
			t.Fatalf("invocation %d: %v on %q, want %s", i, s.err, s.node, owner.Name)
		}
	}

	killed := time.Now()
	if err := owner.Kill(); err != nil {
		t.Fatal(err)
	}
	first, failover := firstSuccess(t, ctx, c, ctr, fn.Name, "after", killed)
	inv := first.inv
	var source string
	if inv.Timing.Restore != nil {
		source = inv.Timing.Restore.Source
	}
	fetched, chunks, err := survivor.RegistryFetched(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover: first success %s after the kill on %s; that invocation took %s: import %.1f ms, restore from %q, %s cold total %.1f ms; %s fetched %d chunks, %.1f MiB",
		failover.Round(time.Millisecond), first.node, first.took.Round(time.Millisecond), inv.Timing.ImportMS, source,
		inv.Strategy, inv.Timing.TotalMS, survivor.Name, chunks, float64(fetched)/(1<<20))
	if first.node != survivor.Name || failover > 5*time.Second {
		t.Errorf("after the kill: first success on %q after %s; want %s within 5 s", first.node, failover, survivor.Name)
	}
	if inv.Mode != "cold" || inv.Timing.ImportMS <= 0 || source != "registry" {
		t.Errorf("the survivor's first invocation: mode %q, import %.1f ms, restore source %q; want a cold restore of a snapshot imported from the registry",
			inv.Mode, inv.Timing.ImportMS, source)
	}
	if fetched <= 0 {
		t.Errorf("%s fetched nothing from the registry", survivor.Name)
	}
	// The import happened once: the next invocations find the function.
	if s := invokeLB(ctx, c, fn.Name, "after-import", ctr.addr, 0); s.err != nil || s.inv.Timing.ImportMS != 0 {
		t.Errorf("the next invocation: %v, import %.1f ms; want no second import", s.err, s.inv.Timing.ImportMS)
	}
	if err := c.WaitStates(ctx, func(st map[string]string) bool { return st[owner.Name] == "DOWN" }); err != nil {
		t.Fatal(err)
	}
	down := time.Since(killed)
	t.Logf("HAProxy marked %s DOWN %s after the kill", owner.Name, down.Round(time.Millisecond))
	if down > 5*time.Second {
		t.Errorf("HAProxy took %s to stop sending to the killed node, want a few seconds", down)
	}
}

// TestClusterStoreDown: with the object store stopped, the node that
// prepared the function and a node that pulled it in full still restore;
// a node that imported it lazily restores when its chunk cache holds
// every page the restore reads and otherwise answers 503
// registry_unavailable; a node that never saw the function answers 503
// registry_unavailable. Nothing is lost: with the store back every node
// serves it, and no refused invocation ran.
func TestClusterStoreDown(t *testing.T) {
	parallel(t)
	c, ctr := countingCluster(t, 4, withStore(t))
	ctx := ctxT(t)
	owner, pulled, lazy, never := c.Nodes[0], c.Nodes[1], c.Nodes[2], c.Nodes[3]
	fn := publishCounting(t, ctx, c, ctr, owner)
	coldOn := func(n *cluster.Node, id string) (*client.Invocation, error) {
		ev, _ := json.Marshal(map[string]any{"id": id, "counter": ctr.addr, "seconds": 0})
		return c.NodeClient(n).InvokeFunction(ctx, fn.Name, ev, client.InvokeOptions{Strategy: "vanilla", EvictCache: true})
	}
	// Both import the function on their first invocation; pulled then
	// completes the snapshot with a full pull.
	for _, n := range []*cluster.Node{pulled, lazy} {
		if inv, err := coldOn(n, "import-"+n.Name); err != nil || inv.Timing.ImportMS <= 0 {
			t.Fatalf("first invocation on %s: %v (%+v); want an import from the registry", n.Name, err, inv)
		}
	}
	pr, err := c.NodeClient(pulled).PullSnapshot(ctx, client.PullRequest{Function: fn.Name})
	if err != nil || pr.Snapshot.Memory != client.MemoryLocal {
		t.Fatalf("full pull on %s: %v %+v", pulled.Name, err, pr)
	}

	c.Store.Stop()
	refused := func(n *cluster.Node, id string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable || ae.Code != "registry_unavailable" {
			t.Fatalf("%s with the store down: %v; want 503 registry_unavailable", n.Name, err)
		}
		t.Logf("%s with the store down: %d %s: %s", n.Name, ae.Status, ae.Code, ae.Message)
		if k := ctr.count(id); k != 0 {
			t.Errorf("the refused invocation %s ran %d times", id, k)
		}
	}
	for _, n := range []*cluster.Node{owner, pulled} {
		inv, err := coldOn(n, "down-"+n.Name)
		if err != nil || !inv.OK || inv.Mode != "cold" {
			t.Errorf("%s with the store down: %v %+v; want a cold restore from what it holds", n.Name, err, inv)
		} else {
			t.Logf("%s with the store down: cold restore in %.1f ms", n.Name, inv.Timing.TotalMS)
		}
	}
	if inv, err := coldOn(lazy, "down-lazy"); err == nil {
		t.Logf("%s (lazy) with the store down: every page was in its chunk cache: cold restore in %.1f ms", lazy.Name, inv.Timing.TotalMS)
	} else {
		refused(lazy, "down-lazy", err)
	}
	_, err = coldOn(never, "down-never")
	refused(never, "down-never", err)
	if fns, err := c.NodeClient(never).ListFunctions(ctx); err != nil || len(fns) != 0 {
		t.Errorf("%s kept %v (%v) of the failed import", never.Name, fns, err)
	}

	if err := c.Store.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		id := "back-" + n.Name
		if inv, err := coldOn(n, id); err != nil || !inv.OK {
			t.Errorf("%s with the store back: %v", n.Name, err)
		} else if k := ctr.count(id); k != 1 {
			t.Errorf("%s ran %d times", id, k)
		}
	}
}

// TestClusterRepublish: new code for a function, published from its owner,
// reaches a node that imported the old version: that node's refresh
// removes its outdated copy, and its next invocation imports and runs the
// new code.
func TestClusterRepublish(t *testing.T) {
	parallel(t)
	c, ctr, ctx, owner, other, fn := countingPair(t, withStore(t), func(cfg *cluster.Config) {
		cfg.Node.Args = append(cfg.Node.Args, "--registry-refresh", "2s")
	})
	oc := c.NodeClient(other)
	ev, _ := json.Marshal(map[string]any{"id": "v1", "counter": ctr.addr, "seconds": 0})
	inv, err := oc.InvokeFunction(ctx, fn.Name, ev, client.InvokeOptions{})
	if err != nil || !inv.OK || inv.Timing.ImportMS <= 0 {
		t.Fatalf("first invocation on %s: %+v, %v; want an import of the first version", other.Name, inv, err)
	}
	old, err := oc.GetFunction(ctx, fn.Name)
	if err != nil {
		t.Fatal(err)
	}

	// New code under the same name, from the owner.
	own := c.NodeClient(owner)
	snaps, err := own.ListSnapshots(ctx, fn.Name)
	if err != nil {
		t.Fatal(err)
	}
	for _, sn := range snaps {
		if err := own.DeleteSnapshot(ctx, sn.ID); err != nil {
			t.Fatal(err)
		}
	}
	if err := own.DeleteFunction(ctx, fn.Name); err != nil {
		t.Fatal(err)
	}
	v2 := fn
	v2.Dir = repoPath("e2e/testdata/cluster-v2")
	if _, err := c.Publish(ctx, v2, owner, json.RawMessage(`{"id":"record"}`)); err != nil {
		t.Fatal(err)
	}
	published := time.Now()
	for {
		if _, err := oc.GetFunction(ctx, fn.Name); errors.Is(err, client.ErrNotFound) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if time.Since(published) > 30*time.Second {
			t.Fatalf("%s still holds the old %s 30 s after new code was published", other.Name, fn.Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s removed its outdated copy %s after publication", other.Name, time.Since(published).Round(time.Millisecond))
	ev, _ = json.Marshal(map[string]any{"id": "v2", "counter": ctr.addr})
	inv, err = oc.InvokeFunction(ctx, fn.Name, ev, client.InvokeOptions{})
	if err != nil || !inv.OK || inv.Timing.ImportMS <= 0 {
		t.Fatalf("invocation after the new code on %s: %+v, %v; want a new import", other.Name, inv, err)
	}
	var got struct {
		ID      string `json:"id"`
		Version int    `json:"version"`
	}
	if err := json.Unmarshal(inv.Result, &got); err != nil || got.Version != 2 {
		t.Fatalf("%s answered %s (%v); want the new code's version 2", other.Name, inv.Result, err)
	}
	if fn, err := oc.GetFunction(ctx, fn.Name); err != nil || fn.Digest == old.Digest {
		t.Fatalf("%s holds %+v (%v); want other code than %s", other.Name, fn, err, old.Digest)
	}
}
