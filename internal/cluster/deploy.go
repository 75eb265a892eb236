package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/thaw-dev/thaw/client"
)

// Function is a function to serve from the cluster.
type Function struct {
	Name      string
	Dir       string   // its directory on this host (handler.py)
	MemoryMiB int      // guest memory
	Services  []string // host:port services its guests may reach
}

// Deploy makes fn servable on nodes: each creates the function and takes
// the snapshot its cold invocations restore (boot, snapshot, stop the
// VM), in parallel. This is the one place that puts a function on nodes:
// with the snapshot registry it becomes "prepare on one node, push the
// snapshot, and the others restore from the registry when they first
// need it".
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

func deployOn(ctx context.Context, c *client.Client, fn Function) error {
	var opts []client.FunctionOption
	if len(fn.Services) > 0 {
		opts = append(opts, client.WithServices(fn.Services...))
	}
	if _, err := c.CreateFunctionFromDir(ctx, fn.Name, fn.Dir, fn.MemoryMiB, 1, opts...); err != nil {
		return err
	}
	vm, err := c.BootVM(ctx, fn.Name)
	if err != nil {
		return err
	}
	_, err = c.CreateSnapshot(ctx, vm.ID)
	return errors.Join(err, c.DeleteVM(ctx, vm.ID))
}
