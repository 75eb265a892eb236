package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
)

// defaultResultWriteIdle is how long writing each resultChunk of a result
// may take before the answer is cut off (Options.ResultWriteIdle).
const defaultResultWriteIdle = 30 * time.Second

// resultChunk is how much of a result is written under one write deadline.
const resultChunk = 1 << 20

// releaseAbove: once a result this large is written, its buffer goes back
// to the operating system at once (a forced collection, a few ms), rather
// than when the heap next grows, so that successive large results do not
// stack up in the daemon's memory.
const releaseAbove = 8 << 20

// writeInvocation answers 200 with an invocation. Its result, up to tens of
// MiB, is written as the guest sent it, after the rest of the document
// (encoded as every answer is): the daemon checked that it is JSON as it
// arrived, and encoding it again would copy it twice (compacted, then
// indented). A caller that takes longer than ResultWriteIdle to read a MiB
// of it is cut off; Content-Length lets it see that its answer is
// incomplete.
func (h *Handler) writeInvocation(w http.ResponseWriter, inv *daemon.Invocation) {
	result := inv.Result
	if len(result) == 0 {
		writeJSON(w, http.StatusOK, inv)
		return
	}
	if len(result) >= releaseAbove {
		defer func() {
			inv.Result, result = nil, nil // the daemon recorded it already
			debug.FreeOSMemory()
		}()
	}
	doc := *inv
	doc.Result = nil
	head, err := json.MarshalIndent(&doc, "", "  ")
	if err != nil { // the document is the daemon's own types: never
		writeError(w, http.StatusInternalServerError, "internal", "encode the invocation: "+err.Error())
		return
	}
	// head ends with "\n}": the result goes in before that.
	head = append(head[:len(head)-2], ",\n  \"result\": "...)
	const tail = "\n}\n"
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(head)+len(result)+len(tail)))
	w.WriteHeader(http.StatusOK)
	idle := h.opts.ResultWriteIdle
	if idle <= 0 {
		idle = defaultResultWriteIdle
	}
	rc := http.NewResponseController(w)
	defer func() { _ = rc.SetWriteDeadline(time.Time{}) }()
	if _, err := w.Write(head); err != nil {
		return
	}
	for len(result) > 0 {
		n := min(len(result), resultChunk)
		if err := rc.SetWriteDeadline(time.Now().Add(idle)); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return
		}
		if _, err := w.Write(result[:n]); err != nil {
			h.log.Info("caller stopped reading a result", "invocation", inv.ID, "written", len(inv.Result)-len(result), "bytes", len(inv.Result), "err", err)
			return
		}
		result = result[n:]
	}
	_, _ = w.Write([]byte(tail))
}
