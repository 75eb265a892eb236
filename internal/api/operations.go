package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// The long requests (boot, prepare, store, copy, push, pull) take ?wait: true or
// absent holds the request until the work is done, as always; false
// starts the work as an operation and answers 202 with it and its
// Location, /v1/operations/{id}.

// waitParam reads ?wait.
func waitParam(r *http.Request) (bool, error) {
	switch v := r.URL.Query().Get("wait"); v {
	case "", "true":
		return true, nil
	case "false":
		return false, nil
	default:
		return false, fmt.Errorf("%w: wait %q: use true or false", daemon.ErrInvalid, v)
	}
}

// opContext is the request's context naming the request, for the
// operation it starts.
func (h *Handler) opContext(w http.ResponseWriter, r *http.Request) context.Context {
	return daemon.WithRequestID(r.Context(), w.Header().Get(RequestIDHeader))
}

// accepted answers a started operation: 202, its body and its Location.
func (h *Handler) accepted(w http.ResponseWriter, r *http.Request, op *daemon.Operation, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/operations/"+op.ID)
	writeJSON(w, http.StatusAccepted, operationBody(op))
}

// operationBody is an operation's API body: a failed one's error becomes
// the status and error the synchronous request would have answered.
func operationBody(op *daemon.Operation) *wire.Operation {
	out := op.Operation
	if op.State == wire.OpFailed && op.Err != nil {
		status, code := statusOf(op.Err)
		out.Error = &wire.OperationError{Status: status,
			ErrorDetail: wire.ErrorDetail{Code: code, Message: op.Err.Error(), RequestID: op.RequestID}}
	}
	return &out
}

// snapshotOperation serves a long request on the snapshot {id} (store,
// copy): with ?wait=false, start begins the work as an operation (202);
// otherwise do does it and answers.
func (h *Handler) snapshotOperation(w http.ResponseWriter, r *http.Request, start func(context.Context, string) (*daemon.Operation, error), do func(ctx context.Context, id string)) {
	wait, err := waitParam(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if !wait {
		op, err := start(h.opContext(w, r), r.PathValue("id"))
		h.accepted(w, r, op, err)
		return
	}
	do(r.Context(), r.PathValue("id"))
}

func (h *Handler) storeSnapshot(w http.ResponseWriter, r *http.Request) {
	h.snapshotOperation(w, r, h.svc.StartStore, func(ctx context.Context, id string) {
		e, err := h.svc.StoreSnapshot(ctx, id)
		reply(h, w, r, http.StatusOK, e, err)
	})
}

func (h *Handler) copySnapshot(w http.ResponseWriter, r *http.Request) {
	h.snapshotOperation(w, r, h.svc.StartCopy, func(ctx context.Context, id string) {
		sn, err := h.svc.CopySnapshot(ctx, id)
		replyAs(h, w, r, http.StatusCreated, sn, err, daemon.SnapshotBody)
	})
}

func (h *Handler) pushSnapshot(w http.ResponseWriter, r *http.Request) {
	h.snapshotOperation(w, r, h.svc.StartPush, func(ctx context.Context, id string) {
		res, err := h.svc.PushSnapshot(ctx, id)
		reply(h, w, r, http.StatusOK, res, err)
	})
}

// startOrServe serves a long request read as waiting[T]: with wait=false
// start runs it as an operation (202), else do answers status.
func startOrServe[T, R any](h *Handler, start func(context.Context, T) (*daemon.Operation, error),
	do func(context.Context, T) (R, error), status int) func(http.ResponseWriter, *http.Request, waiting[T]) {
	return func(w http.ResponseWriter, r *http.Request, wr waiting[T]) {
		if !wr.wait {
			op, err := start(h.opContext(w, r), wr.req)
			h.accepted(w, r, op, err)
			return
		}
		res, err := do(r.Context(), wr.req)
		reply(h, w, r, status, res, err)
	}
}

// readSmallBody decodes a JSON body of at most 4 KiB.
func readSmallBody[T any](w http.ResponseWriter, r *http.Request) (T, error) {
	var v T
	return v, decode(w, r, 4096, &v)
}

// cancelOperation cancels a running operation and answers it once its
// work has stopped.
func (h *Handler) cancelOperation(w http.ResponseWriter, r *http.Request) {
	op, err := h.svc.CancelOperation(h.opContext(w, r), r.PathValue("id"))
	replyAs(h, w, r, http.StatusOK, op, err, operationBody)
}
