package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/registry"
)

// Function is a function to serve from the cluster.
type Function struct {
	Name      string
	Dir       string   // its directory on this host (handler.py)
	MemoryMiB int      // guest memory
	Services  []string // host:port services its guests may reach
}

// Deploy makes fn servable on nodes without a registry: each creates the
// function and takes the snapshot its cold invocations restore (boot,
// snapshot, stop the VM), in parallel. A cluster with an object store
// uses Publish instead.
func (c *Cluster) Deploy(ctx context.Context, fn Function, nodes ...*Node) error {
	if len(nodes) == 0 {
		nodes = c.Nodes
	}
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := deployOn(ctx, c.NodeClient(n), fn); err != nil {
				errs[i] = fmt.Errorf("deploy %s on %s: %w", fn.Name, n.Name, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func createOn(ctx context.Context, c *client.Client, fn Function) error {
	var opts []client.FunctionOption
	if len(fn.Services) > 0 {
		opts = append(opts, client.WithServices(fn.Services...))
	}
	_, err := c.CreateFunctionFromDir(ctx, fn.Name, fn.Dir, fn.MemoryMiB, 1, opts...)
	return err
}

func deployOn(ctx context.Context, c *client.Client, fn Function) error {
	if err := createOn(ctx, c, fn); err != nil {
		return err
	}
	vm, err := c.BootVM(ctx, fn.Name)
	if err != nil {
		return err
	}
	_, err = c.CreateSnapshot(ctx, vm.ID)
	return errors.Join(err, c.DeleteVM(ctx, vm.ID))
}

// Publication is what Publish did.
type Publication struct {
	Owner    string
	Prepare  *client.PrepareResult
	Snapshot string                        // the warm snapshot, now in the registry
	Push     *client.PushResult            // the explicit push; nil when prepare's push already stored it
	PushMS   float64                       // the explicit push's wall time, as the client saw it
	Pulls    map[string]*client.PullResult // node name -> its pull (Pull only)
}

// Publish puts fn on the cluster through the registry: owner creates and
// prepares it (boot, record with event, warm snapshot, every strategy's
// artifacts), and the warm snapshot goes to the object store (the node's
// push on prepare, or an explicit push if that did not store it). Other
// nodes hold nothing of fn: they import it from the registry on their
// first invocation of it. The nodes in pullOn instead pull it now in full
// (a node that must serve without the store).
func (c *Cluster) Publish(ctx context.Context, fn Function, owner *Node, event json.RawMessage, pullOn ...*Node) (*Publication, error) {
	if c.Store == nil {
		return nil, errors.New("publish: the cluster has no object store")
	}
	oc := c.NodeClient(owner)
	if err := createOn(ctx, oc, fn); err != nil {
		return nil, fmt.Errorf("publish %s: create on %s: %w", fn.Name, owner.Name, err)
	}
	res, err := oc.Prepare(ctx, fn.Name, event, client.PrepareOptions{})
	if err != nil {
		return nil, fmt.Errorf("publish %s: prepare on %s: %w", fn.Name, owner.Name, err)
	}
	p := &Publication{Owner: owner.Name, Prepare: res, Snapshot: res.Warm.ID, Pulls: map[string]*client.PullResult{}}
	st, err := registry.Open(c.Store.Config)
	if err != nil {
		return nil, err
	}
	if ok, err := st.HasManifest(ctx, p.Snapshot); err != nil {
		return nil, fmt.Errorf("publish %s: %w", fn.Name, err)
	} else if !ok {
		t0 := time.Now()
		if p.Push, err = oc.PushSnapshot(ctx, p.Snapshot); err != nil {
			return nil, fmt.Errorf("publish %s: push %s from %s: %w", fn.Name, p.Snapshot, owner.Name, err)
		}
		p.PushMS = ms(time.Since(t0))
	}
	errs := make([]error, len(pullOn))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, n := range pullOn {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr, err := c.NodeClient(n).PullSnapshot(ctx, client.PullRequest{Function: fn.Name})
			if err != nil {
				errs[i] = fmt.Errorf("publish %s: pull on %s: %w", fn.Name, n.Name, err)
				return
			}
			mu.Lock()
			p.Pulls[n.Name] = pr
			mu.Unlock()
		}()
	}
	wg.Wait()
	return p, errors.Join(errs...)
}
