// Package httpreq is what thaw's two HTTP servers, the API and the
// functions listener, do alike to every request: give it an id and note
// the status it is answered with.
package httpreq

import (
	"crypto/rand"
	"encoding/hex"
	"net/http"
)

// IDHeader carries every request's id in its answer.
const IDHeader = "X-Request-Id"

// NewID is a request's id: random, so ids never repeat across daemon
// restarts.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "req-" + hex.EncodeToString(b[:])
}

// StatusWriter notes the status a handler answers with.
type StatusWriter struct {
	http.ResponseWriter
	Status int // 200 until WriteHeader says otherwise
}

// NewStatusWriter wraps w.
func NewStatusWriter(w http.ResponseWriter) *StatusWriter {
	return &StatusWriter{ResponseWriter: w, Status: http.StatusOK}
}

// WriteHeader notes code and passes it on.
func (w *StatusWriter) WriteHeader(code int) {
	w.Status = code
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the connection (write
// deadlines).
func (w *StatusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
