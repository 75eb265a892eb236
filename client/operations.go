package client

import (
	"context"
	"encoding/json"
	"net/url"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// Long requests (boot, prepare, store, copy) can run as operations in the
// daemon: the Start methods send them with ?wait=false and return the
// operation at once; WaitOperation follows it to its end. The work goes on
// in the daemon when the client goes away.

// WithPollInterval sets how often WaitOperation asks about an operation
// (default 500 ms).
func WithPollInterval(d time.Duration) Option { return func(c *Client) { c.poll = d } }

// StartBootVM starts booting a function's VM (operation kind boot).
func (c *Client) StartBootVM(ctx context.Context, function string) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/vms?wait=false", map[string]string{"function": function})
}

// StartPrepare starts preparing a function (operation kind prepare).
func (c *Client) StartPrepare(ctx context.Context, function string, recordEvent json.RawMessage, o PrepareOptions) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/functions/"+url.PathEscape(function)+"/prepare?wait=false", prepareBody(recordEvent, o))
}

// StartStoreSnapshot starts placing a snapshot in the memory store
// (operation kind store).
func (c *Client) StartStoreSnapshot(ctx context.Context, id string) (*Operation, error) {
	return call[Operation](ctx, c, "PUT", "/v1/snapshots/"+url.PathEscape(id)+"/store?wait=false", nil)
}

// StartCopySnapshot starts copying a snapshot (operation kind copy).
func (c *Client) StartCopySnapshot(ctx context.Context, id string) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/copy?wait=false", nil)
}

// Operation gets an operation.
func (c *Client) Operation(ctx context.Context, id string) (*Operation, error) {
	return call[Operation](ctx, c, "GET", "/v1/operations/"+url.PathEscape(id), nil)
}

// ListOperations lists the operations the daemon keeps, oldest first.
func (c *Client) ListOperations(ctx context.Context) ([]Operation, error) {
	return all[Operation](ctx, c, "/v1/operations", url.Values{}, 0)
}

// DeleteOperation forgets a finished operation.
func (c *Client) DeleteOperation(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/operations/"+url.PathEscape(id), nil, nil)
}

// WaitOperation polls an operation until it has finished, calling
// onProgress (if not nil) with the first answer and each one whose state
// or progress changed. A failed operation returns with its error as an
// *APIError (typed by its status, as the synchronous request's would be).
// When ctx ends the operation goes on in the daemon.
func (c *Client) WaitOperation(ctx context.Context, id string, onProgress func(*Operation)) (*Operation, error) {
	var last *Operation
	for {
		op, err := c.Operation(ctx, id)
		if err != nil {
			return nil, err
		}
		if onProgress != nil && (last == nil || last.State != op.State || last.Progress != op.Progress) {
			onProgress(op)
		}
		last = op
		if op.State != wire.OpRunning {
			return op, OperationErr(op)
		}
		select {
		case <-ctx.Done():
			return op, ctx.Err()
		case <-time.After(c.poll):
		}
	}
}

// OperationErr is a finished operation's error as an *APIError (nil if it
// has not failed).
func OperationErr(op *Operation) error {
	if op.State != wire.OpFailed {
		return nil
	}
	if op.Error == nil {
		return &APIError{Status: 500, Code: "internal", Message: "operation " + op.ID + " failed without an error", kind: ErrServer}
	}
	return &APIError{Status: op.Error.Status, Code: op.Error.Code, Message: op.Error.Message, RequestID: op.Error.RequestID,
		kind: kindOf(op.Error.Status)}
}

// StartPushSnapshot starts pushing a snapshot to the registry (operation
// kind push).
func (c *Client) StartPushSnapshot(ctx context.Context, id string) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/push?wait=false", nil)
}

// StartCollectRegistry starts a registry garbage collection (operation
// kind gc).
func (c *Client) StartCollectRegistry(ctx context.Context, req GCRequest) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/registry/gc?wait=false", req)
}

// StartPullSnapshot starts pulling a snapshot from the registry (operation
// kind pull): req names a snapshot or a function.
func (c *Client) StartPullSnapshot(ctx context.Context, req PullRequest) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/snapshots/pull?wait=false", req)
}

// CancelOperation cancels a running operation and returns it once its
// work has stopped: failed with a cancellation (its Error's code
// canceled), or succeeded if the work finished first. An operation that
// has ended is ErrConflict.
func (c *Client) CancelOperation(ctx context.Context, id string) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/operations/"+url.PathEscape(id)+"/cancel", nil)
}
