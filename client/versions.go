package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/thaw-dev/thaw/wire"
)

// Versions, aliases and rollback (docs/functions.md).
type (
	Version  = wire.Version
	Alias    = wire.Alias
	Route    = wire.Route
	Rollback = wire.Rollback
)

func functionPath(name string) string { return "/v1/functions/" + url.PathEscape(name) }

// ListVersions lists a function's versions, oldest first.
func (c *Client) ListVersions(ctx context.Context, function string) ([]Version, error) {
	return all[Version](ctx, c, functionPath(function)+"/versions", url.Values{}, 0)
}

// GetVersion gets one version of a function.
func (c *Client) GetVersion(ctx context.Context, function string, version int) (*Version, error) {
	return call[Version](ctx, c, "GET", functionPath(function)+"/versions/"+strconv.Itoa(version), nil)
}

// ListAliases lists a function's aliases.
func (c *Client) ListAliases(ctx context.Context, function string) ([]Alias, error) {
	return all[Alias](ctx, c, functionPath(function)+"/aliases", url.Values{}, 0)
}

// GetAlias gets one alias of a function.
func (c *Client) GetAlias(ctx context.Context, function, alias string) (*Alias, error) {
	return call[Alias](ctx, c, "GET", functionPath(function)+"/aliases/"+url.PathEscape(alias), nil)
}

// SetAlias routes an alias to one version, or two by weight (adding up to
// 100); it creates the alias if needed.
func (c *Client) SetAlias(ctx context.Context, function, alias string, routing []Route) (*Alias, error) {
	return call[Alias](ctx, c, "PUT", functionPath(function)+"/aliases/"+url.PathEscape(alias), wire.AliasRequest{Routing: routing})
}

// DeleteAlias removes an alias.
func (c *Client) DeleteAlias(ctx context.Context, function, alias string) error {
	return c.doJSON(ctx, "DELETE", functionPath(function)+"/aliases/"+url.PathEscape(alias), nil, nil)
}

// RollbackFunction moves the live alias to version to (0: the version it
// routed to before).
func (c *Client) RollbackFunction(ctx context.Context, function string, to int) (*Rollback, error) {
	return call[Rollback](ctx, c, "POST", functionPath(function)+"/rollback", wire.RollbackRequest{To: to})
}
