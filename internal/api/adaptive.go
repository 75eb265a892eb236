package api

import (
	"net/http"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// The adaptive restore's routes: a function's restore document (also in
// GET /v1/functions/{name}) and its settings.
func (h *Handler) adaptiveRoutes() []route {
	return []route{
		{"GET", "/v1/functions/{name}/restore", one(h, "name", http.StatusOK, h.svc.FunctionRestore, same)},
		{"PUT", "/v1/functions/{name}/restore", readThen(h, readSmallBody[wire.RestoreSettings], h.setRestore)},
		{"POST", "/v1/functions/{name}/refresh", readThen(h, readWaiting(readRefresh), startOrServe(h, h.svc.StartRefresh, h.svc.RefreshWorkingSets, http.StatusOK))},
	}
}

// readRefresh decodes POST /v1/functions/{name}/refresh (an event is at
// most an invocation's).
func readRefresh(w http.ResponseWriter, r *http.Request) (daemon.RefreshRequest, error) {
	var req wire.RefreshRequest
	if err := decode(w, r, maxInvokeBody, &req); err != nil {
		return daemon.RefreshRequest{}, err
	}
	return daemon.RefreshRequest{Function: r.PathValue("name"), Event: req.Event, Strategies: req.Strategies}, nil
}

// getFunction answers a function with its restore document.
func (h *Handler) getFunction(w http.ResponseWriter, r *http.Request) {
	f, err := h.svc.GetFunction(r.Context(), r.PathValue("name"))
	if err != nil {
		h.fail(w, r, err)
		return
	}
	body := FunctionBody(f)
	body.Restore = h.svc.RestoreDoc(r.Context(), f.Name)
	writeJSON(w, http.StatusOK, body)
}

func (h *Handler) setRestore(w http.ResponseWriter, r *http.Request, req wire.RestoreSettings) {
	doc, err := h.svc.SetRestoreSettings(r.Context(), r.PathValue("name"), req)
	replyAs(h, w, r, http.StatusOK, doc, err, same)
}
