package daemon

import (
	"context"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon/history"
	"github.com/thaw-dev/thaw/wire"
)

// Function logs: what an invocation wrote to stdout and stderr, and the
// guest kernel's messages, come back with the guest's reply and are kept
// with the invocation history (package history), pruned with it and under
// a byte budget.

// Bounds of the logs (package history).
const (
	DefaultHistoryMaxLogBytes = history.DefaultHistoryMaxLogBytes
	DefaultLogPage            = history.DefaultLogPage
	MaxLogPage                = history.MaxLogPage
	MaxLogWait                = history.MaxLogWait
)

// A place in a function's logs, a request for some of its lines and a
// page of them (package history).
type (
	LogPosition = history.LogPosition
	LogsRequest = history.LogsRequest
	LogsPage    = history.LogsPage
)

// FunctionLogs returns a function's log lines after req.After, waiting up
// to req.Wait for new ones if there are none yet (package history).
func (s *Service) FunctionLogs(ctx context.Context, req LogsRequest) (*LogsPage, error) {
	return s.history.FunctionLogs(ctx, req)
}

// invocationLogs are a reply's logs as the invocation answers them.
func invocationLogs(ctx context.Context, r *agent.Reply) *wire.InvocationLogs {
	return history.InvocationLogs(ctx, r)
}
