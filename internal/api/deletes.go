package api

import (
	"fmt"
	"net/http"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// boolParam reads a boolean query parameter: absent or "false" is false,
// "true" is true, anything else is 400.
func boolParam(r *http.Request, name string) (bool, error) {
	switch v := r.URL.Query().Get(name); v {
	case "", "false":
		return false, nil
	case "true":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q: use true or false", daemon.ErrInvalid, name, v)
	}
}

// getVM answers a VM with the invocation it is serving, if any.
func (h *Handler) getVM(w http.ResponseWriter, r *http.Request) {
	v, err := h.svc.GetVM(r.Context(), r.PathValue("id"))
	replyAs(h, w, r, http.StatusOK, v, err, func(v *catalog.VM) *wire.VM {
		b := vmBody(v)
		b.Invocation = h.svc.RunningInvocation(v.ID)
		return b
	})
}

// deleteVM serves DELETE /v1/vms/{id}[?force=true].
func (h *Handler) deleteVM(w http.ResponseWriter, r *http.Request) {
	force, err := boolParam(r, "force")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	del := h.svc.DeleteVM
	if force {
		del = h.svc.DeleteVMForce
	}
	replyDone(h, w, r, del(r.Context(), r.PathValue("id")))
}

// deleteFunction serves DELETE /v1/functions/{name}[?cascade=true]: 200
// with what went.
func (h *Handler) deleteFunction(w http.ResponseWriter, r *http.Request) {
	cascade, err := boolParam(r, "cascade")
	if err != nil {
		h.fail(w, r, err)
		return
	}
	res, err := h.svc.DeleteFunctionWith(r.Context(), r.PathValue("name"), cascade)
	reply(h, w, r, http.StatusOK, res, err)
}
