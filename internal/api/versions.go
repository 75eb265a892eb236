package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/versions"
	"github.com/thaw-dev/thaw/wire"
)

// versionRoutes are a function's versions, aliases and rollback.
func (h *Handler) versionRoutes() []route {
	return []route{
		{"GET", "/v1/functions/{name}/versions", list(h, func(ctx context.Context, r *http.Request) ([]*daemon.VersionInfo, error) {
			return h.svc.ListVersions(ctx, r.PathValue("name"))
		}, func(v *daemon.VersionInfo) string { return fmt.Sprintf("%012d", v.Number) }, daemon.VersionBody)},
		{"GET", "/v1/functions/{name}/versions/{version}", h.getVersion},
		{"GET", "/v1/functions/{name}/aliases", list(h, func(ctx context.Context, r *http.Request) ([]*catalog.Alias, error) {
			return h.svc.ListAliases(ctx, r.PathValue("name"))
		}, func(a *catalog.Alias) string { return a.Name }, daemon.AliasBody)},
		{"GET", "/v1/functions/{name}/aliases/{alias}", h.getAlias},
		{"PUT", "/v1/functions/{name}/aliases/{alias}", readThen(h, readSetAlias, h.setAlias)},
		{"DELETE", "/v1/functions/{name}/aliases/{alias}", h.deleteAlias},
		{"POST", "/v1/functions/{name}/rollback", readThen(h, readRollback, h.rollback)},
		{"POST", "/v1/functions/{name}/deploy", readThen(h, readWaiting(readDeploy), startOrServe(h, h.svc.StartDeploy, h.svc.Deploy, http.StatusCreated))},
	}
}

// readDeploy decodes either form of POST /v1/functions/{name}/deploy: a
// tar.gz body (read by the service) with the settings as query
// parameters, or JSON naming a directory on the daemon's host.
func readDeploy(w http.ResponseWriter, r *http.Request) (daemon.DeploySpec, error) {
	spec := daemon.DeploySpec{FunctionSpec: daemon.FunctionSpec{Name: r.PathValue("name")}}
	if err := daemon.ValidName(spec.Name); err != nil {
		return spec, err
	}
	if isArchive(r) {
		q := r.URL.Query()
		if err := archiveSettings(q, &spec.FunctionSpec); err != nil {
			return spec, err
		}
		for _, b := range []struct {
			name string
			dst  *bool
		}{{"no_promote", &spec.NoPromote}, {"prepare", &spec.Prepare}} {
			switch v := q.Get(b.name); v {
			case "", "false":
			case "true":
				*b.dst = true
			default:
				return spec, fmt.Errorf("%w: %s=%q: want true or false", daemon.ErrInvalid, b.name, v)
			}
		}
		if ev := q.Get("record_event"); ev != "" {
			spec.RecordEvent = json.RawMessage(ev)
		}
		spec.Archive = http.MaxBytesReader(w, r.Body, maxArchiveBody)
		return spec, nil
	}
	req, err := decodeDirectoryRequest(w, r, maxInvokeBody, func(req *wire.DeployRequest) string { return req.Directory })
	if err != nil {
		return spec, err
	}
	spec.Directory, spec.MemoryMiB, spec.VCPUs = req.Directory, req.MemoryMiB, req.VCPUs
	spec.MaxConcurrency, spec.KeepAliveS, spec.VMMPool, spec.VMMPoolTTLS = req.MaxConcurrency, req.KeepAliveS, req.VMMPool, req.VMMPoolTTLS
	spec.Env, spec.Secrets, spec.Network = req.Env, req.Secrets, networkPolicy(req.Network)
	spec.NoPromote, spec.Prepare, spec.RecordEvent = req.NoPromote, req.Prepare, req.RecordEvent
	return spec, nil
}

func (h *Handler) getVersion(w http.ResponseWriter, r *http.Request) {
	n, err := versions.ParseVersion(r.PathValue("version"))
	if err != nil {
		h.fail(w, r, fmt.Errorf("%w: %v", daemon.ErrInvalid, err))
		return
	}
	v, err := h.svc.GetVersionInfo(r.Context(), r.PathValue("name"), n)
	replyAs(h, w, r, http.StatusOK, v, err, daemon.VersionBody)
}

func (h *Handler) getAlias(w http.ResponseWriter, r *http.Request) {
	a, err := h.svc.GetAlias(r.Context(), r.PathValue("name"), r.PathValue("alias"))
	replyAs(h, w, r, http.StatusOK, a, err, daemon.AliasBody)
}

// readSetAlias decodes PUT /v1/functions/{name}/aliases/{alias}.
func readSetAlias(w http.ResponseWriter, r *http.Request) (versions.Routing, error) {
	var req wire.AliasRequest
	if err := decode(w, r, maxControlBody, &req); err != nil {
		return nil, err
	}
	routing := make(versions.Routing, len(req.Routing))
	for i, x := range req.Routing {
		routing[i] = versions.Route{Version: x.Version, Weight: x.Weight}
	}
	if err := routing.Check(); err != nil {
		return nil, fmt.Errorf("%w: %v", daemon.ErrInvalid, err)
	}
	return routing, nil
}

func (h *Handler) setAlias(w http.ResponseWriter, r *http.Request, routing versions.Routing) {
	a, err := h.svc.SetAlias(r.Context(), r.PathValue("name"), r.PathValue("alias"), routing)
	replyAs(h, w, r, http.StatusOK, a, err, daemon.AliasBody)
}

func (h *Handler) deleteAlias(w http.ResponseWriter, r *http.Request) {
	replyDone(h, w, r, h.svc.DeleteAlias(r.Context(), r.PathValue("name"), r.PathValue("alias")))
}

// readRollback decodes POST /v1/functions/{name}/rollback (its body may be
// left out).
func readRollback(w http.ResponseWriter, r *http.Request) (wire.RollbackRequest, error) {
	var req wire.RollbackRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, maxControlBody, &req); err != nil {
			return req, err
		}
	}
	if req.To < 0 {
		return req, fmt.Errorf("%w: to: want a version number from 1", daemon.ErrInvalid)
	}
	return req, nil
}

func (h *Handler) rollback(w http.ResponseWriter, r *http.Request, req wire.RollbackRequest) {
	res, err := h.svc.Rollback(r.Context(), r.PathValue("name"), req.To)
	replyAs(h, w, r, http.StatusOK, res, err, func(x *daemon.RollbackResult) *wire.Rollback {
		return &wire.Rollback{Function: x.Function, From: x.From, To: x.To, MS: x.MS}
	})
}
