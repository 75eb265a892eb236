package client

import (
	"context"
	"encoding/json"
	"net/url"

	"github.com/thaw-dev/thaw/wire"
)

// The adaptive restore: a function's strategy and refresh settings, and
// the evidence behind its choices.

// Types of the adaptive restore's documents.
type (
	FunctionRestore   = wire.FunctionRestore
	RestoreSettings   = wire.RestoreSettings
	RestoreVersion    = wire.RestoreVersion
	RestoreLocation   = wire.RestoreLocation
	WorkingSetRefresh = wire.WorkingSetRefresh
	StrategyChoice    = wire.StrategyChoice
)

// WithStrategy sets how the function's cold starts that name no strategy
// restore: "auto" or a strategy ("default": the daemon's default).
func WithStrategy(strategy string) FunctionOption {
	return func(o *functionOptions) { o.restore.Strategy = &strategy }
}

// WithRefresh sets when the function's recorded working sets are recorded
// again: "prepare", "traffic" or "off" ("default": the daemon's default).
func WithRefresh(refresh string) FunctionOption {
	return func(o *functionOptions) { o.restore.Refresh = &refresh }
}

func (o *functionOptions) restoreQuery(q url.Values) {
	if o.restore.Strategy != nil {
		q.Set("strategy", *o.restore.Strategy)
	}
	if o.restore.Refresh != nil {
		q.Set("refresh", *o.restore.Refresh)
	}
}

func (o *functionOptions) restoreRequest(in *wire.CreateFunctionRequest) {
	if o.restore.Strategy != nil {
		in.Strategy = *o.restore.Strategy
	}
	if o.restore.Refresh != nil {
		in.Refresh = *o.restore.Refresh
	}
}

// FunctionRestore gets how a function's cold starts restore: its settings,
// and per version the current choice, its evidence, drift and refreshes.
func (c *Client) FunctionRestore(ctx context.Context, name string) (*FunctionRestore, error) {
	return call[FunctionRestore](ctx, c, "GET", "/v1/functions/"+url.PathEscape(name)+"/restore", nil)
}

// SetFunctionRestore changes a function's restore settings (nil fields
// keep theirs) and returns its restore document.
func (c *Client) SetFunctionRestore(ctx context.Context, name string, s RestoreSettings) (*FunctionRestore, error) {
	return call[FunctionRestore](ctx, c, "PUT", "/v1/functions/"+url.PathEscape(name)+"/restore", s)
}

// RefreshWorkingSets records the working sets of the newest snapshot of
// function (NAME, NAME:VERSION or NAME:ALIAS) again now and swaps them in:
// with event (used once; nil: the prepare's input), for strategies (none:
// every one with a recorded set).
func (c *Client) RefreshWorkingSets(ctx context.Context, function string, event json.RawMessage, strategies ...string) (*WorkingSetRefresh, error) {
	return call[WorkingSetRefresh](ctx, c, "POST", "/v1/functions/"+url.PathEscape(function)+"/refresh",
		wire.RefreshRequest{Event: event, Strategies: strategies})
}

// StartRefreshWorkingSets is RefreshWorkingSets as an operation (kind
// refresh).
func (c *Client) StartRefreshWorkingSets(ctx context.Context, function string, event json.RawMessage, strategies ...string) (*Operation, error) {
	return call[Operation](ctx, c, "POST", "/v1/functions/"+url.PathEscape(function)+"/refresh?wait=false",
		wire.RefreshRequest{Event: event, Strategies: strategies})
}
