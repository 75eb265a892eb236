package api

import (
	"context"
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
		{"PUT", "/v1/functions/{name}/aliases/{alias}", h.setAlias},
		{"DELETE", "/v1/functions/{name}/aliases/{alias}", h.deleteAlias},
		{"POST", "/v1/functions/{name}/rollback", h.rollback},
	}
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

func (h *Handler) setAlias(w http.ResponseWriter, r *http.Request) {
	var req wire.AliasRequest
	if err := decode(w, r, maxControlBody, &req); err != nil {
		h.fail(w, r, err)
		return
	}
	routing := make(versions.Routing, len(req.Routing))
	for i, x := range req.Routing {
		routing[i] = versions.Route{Version: x.Version, Weight: x.Weight}
	}
	a, err := h.svc.SetAlias(r.Context(), r.PathValue("name"), r.PathValue("alias"), routing)
	replyAs(h, w, r, http.StatusOK, a, err, daemon.AliasBody)
}

func (h *Handler) deleteAlias(w http.ResponseWriter, r *http.Request) {
	replyDone(h, w, r, h.svc.DeleteAlias(r.Context(), r.PathValue("name"), r.PathValue("alias")))
}

func (h *Handler) rollback(w http.ResponseWriter, r *http.Request) {
	var req wire.RollbackRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, maxControlBody, &req); err != nil {
			h.fail(w, r, err)
			return
		}
	}
	if req.To < 0 {
		h.fail(w, r, fmt.Errorf("%w: to: want a version number from 1", daemon.ErrInvalid))
		return
	}
	res, err := h.svc.Rollback(r.Context(), r.PathValue("name"), req.To)
	replyAs(h, w, r, http.StatusOK, res, err, func(x *daemon.RollbackResult) *wire.Rollback {
		return &wire.Rollback{Function: x.Function, From: x.From, To: x.To, MS: x.MS}
	})
}
