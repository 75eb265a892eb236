package client

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"github.com/thaw-dev/thaw/wire"
)

// A function's logs (GET /v1/functions/{name}/logs).
type (
	InvocationLogs = wire.InvocationLogs
	LogLine        = wire.LogLine
	LogPage        = wire.LogPage
)

// Log line streams (LogLine.Stream).
const (
	StreamOutput = wire.StreamOutput
	StreamKernel = wire.StreamKernel
)

// LogsQuery selects a function's log lines.
type LogsQuery struct {
	Invocation string    // only this invocation's
	Since      time.Time // only of invocations that ended at or after it
	After      string    // a page's Next: the lines after it
	Limit      int       // lines (0: the daemon's default, 1000)
	// Wait: with no line after After yet, the daemon waits up to this
	// long (whole seconds, at most a minute) for one.
	Wait time.Duration
}

// FunctionLogs returns one page of a function's log lines, oldest first.
// Its Next, passed as After, gives the lines that follow, those recorded
// later included: a follower asks again and again with Wait.
func (c *Client) FunctionLogs(ctx context.Context, name string, q LogsQuery) (*LogPage, error) {
	v := url.Values{}
	if q.Invocation != "" {
		v.Set("invocation", q.Invocation)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if q.After != "" {
		v.Set("after", q.After)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if s := int(q.Wait / time.Second); s > 0 {
		v.Set("wait_s", strconv.Itoa(s))
	}
	target := "/v1/functions/" + url.PathEscape(name) + "/logs"
	if len(v) > 0 {
		target += "?" + v.Encode()
	}
	return call[LogPage](ctx, c, "GET", target, nil)
}
