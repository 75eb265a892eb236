package client

import (
	"bytes"
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

// Deploys.
type (
	Deploy        = wire.Deploy
	DeployRequest = wire.DeployRequest
)

// DeployFromDir deploys a local function directory, uploaded as a tar.gz
// (so it works against a daemon on another host too), with the settings
// of req (its Directory is ignored). It waits for the deploy to end.
func (c *Client) DeployFromDir(ctx context.Context, name, dir string, req DeployRequest) (*Deploy, error) {
	var d Deploy
	return &d, c.uploadDeploy(ctx, name, dir, req, false, &d)
}

// StartDeployFromDir is DeployFromDir as an operation.
func (c *Client) StartDeployFromDir(ctx context.Context, name, dir string, req DeployRequest) (*Operation, error) {
	var op Operation
	return &op, c.uploadDeploy(ctx, name, dir, req, true, &op)
}

func (c *Client) uploadDeploy(ctx context.Context, name, dir string, req DeployRequest, detach bool, out any) error {
	archive, err := TarGz(dir)
	if err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]int{"memory_mib": req.MemoryMiB, "vcpus": req.VCPUs, "max_concurrency": req.MaxConcurrency,
		"keep_alive_s": req.KeepAliveS, "vmm_pool": req.VMMPool, "vmm_pool_ttl_s": req.VMMPoolTTLS} {
		if v != 0 {
			q.Set(k, strconv.Itoa(v))
		}
	}
	if n := req.Network; n != nil {
		if n.Egress != "" {
			q.Set("egress", n.Egress)
		}
		for _, s := range n.Services {
			q.Add("allow", s)
		}
	}
	(&functionOptions{env: req.Env, secrets: req.Secrets}).configQuery(q)
	if req.NoPromote {
		q.Set("no_promote", "true")
	}
	if req.Prepare {
		q.Set("prepare", "true")
	}
	if len(req.RecordEvent) > 0 {
		q.Set("record_event", string(req.RecordEvent))
	}
	if detach {
		q.Set("wait", "false")
	}
	return c.do(ctx, "POST", functionPath(name)+"/deploy?"+q.Encode(), bytes.NewReader(archive), "application/gzip", out)
}

// DeployFromServerDir deploys a directory on the daemon's host.
func (c *Client) DeployFromServerDir(ctx context.Context, name string, req DeployRequest) (*Deploy, error) {
	return call[Deploy](ctx, c, "POST", functionPath(name)+"/deploy", req)
}
