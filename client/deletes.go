package client

import (
	"context"
	"net/url"

	"github.com/thaw-dev/thaw/wire"
)

// The answers of deletes.
type (
	FunctionDeletion  = wire.FunctionDeletion
	DeletedVM         = wire.DeletedVM
	DeletedSnapshot   = wire.DeletedSnapshot
	RunningInvocation = wire.RunningInvocation
)

// DeleteVMOptions tune DeleteVMWith.
type DeleteVMOptions struct {
	// Force kills the VM at once instead of waiting for what runs on it:
	// an invocation running on it fails, saying the VM was deleted.
	Force bool
}

// DeleteVMWith deletes a VM as o says. Without Force it returns once what
// runs on the VM has finished (GetVM shows the invocation it waits for).
func (c *Client) DeleteVMWith(ctx context.Context, id string, o DeleteVMOptions) error {
	path := "/v1/vms/" + url.PathEscape(id)
	if o.Force {
		path += "?force=true"
	}
	return c.doJSON(ctx, "DELETE", path, nil, nil)
}

// DeleteFunctionOptions tune DeleteFunctionWith.
type DeleteFunctionOptions struct {
	// Cascade deletes the function's VMs (stopping running ones),
	// snapshots, versions and aliases with it; without it, a function
	// anything uses is refused, the error listing all of it.
	Cascade bool
}

// DeleteFunctionWith deletes a function as o says and returns what went.
func (c *Client) DeleteFunctionWith(ctx context.Context, name string, o DeleteFunctionOptions) (*FunctionDeletion, error) {
	path := "/v1/functions/" + url.PathEscape(name)
	if o.Cascade {
		path += "?cascade=true"
	}
	return call[FunctionDeletion](ctx, c, "DELETE", path, nil)
}
