package triggers

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/httpreq"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The functions listener (thawd --functions-listen) serves the functions'
// callers, apart from the operator's API: endpoints by path prefix, their
// keys, and never the operator's token.

// Headers of the functions listener.
const (
	// KeyHeader carries an endpoint key (or Authorization: Bearer KEY).
	KeyHeader = "X-Thaw-Key"
	// InvocationTypeHeader set to "async" (or Lambda's "Event") queues the
	// request as an asynchronous invocation: 202 with its id.
	InvocationTypeHeader = "X-Thaw-Invocation-Type"
	// IdempotencyKeyHeader makes repeated asynchronous requests one
	// invocation (the operator's API takes it too).
	IdempotencyKeyHeader = "Idempotency-Key"
	requestIDHeader      = httpreq.IDHeader
	invocationIDHeader   = "X-Thaw-Invocation-Id"
)

// Functions listener timeouts: a client gets this long to send its
// headers, and its body (slow clients are cut off, not waited for).
const (
	readHeaderTimeout = 10 * time.Second
	bodyTimeout       = 30 * time.Second
	idleTimeout       = 120 * time.Second
	maxHeaderBytes    = 64 << 10
)

// FunctionsServer is the functions listener's server: HTTP/1.1 with
// keep-alive and HTTP/2 (over TLS when tlsConf is set, else cleartext
// with prior knowledge), with its timeouts and header limit set.
// invokeTimeout is the daemon's default invocation timeout (answers may
// take that long).
func (t *Triggers) FunctionsServer(ctx context.Context, tlsConf *tls.Config, invokeTimeout time.Duration) (*http.Server, error) {
	h, err := t.FunctionsHandler(ctx, invokeTimeout)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout, IdleTimeout: idleTimeout,
		MaxHeaderBytes: maxHeaderBytes, ErrorLog: slog.NewLogLogger(t.log.Handler(), slog.LevelDebug)}
	srv.Protocols = new(http.Protocols)
	srv.Protocols.SetHTTP1(true)
	if tlsConf != nil {
		srv.TLSConfig = tlsConf.Clone()
		srv.Protocols.SetHTTP2(true)
	} else {
		srv.Protocols.SetUnencryptedHTTP2(true)
	}
	return srv, nil
}

// functionsHandler serves endpoints.
type functionsHandler struct {
	t             *Triggers
	routes        *routes
	inflight      chan struct{}
	invokeTimeout time.Duration

	mu     sync.Mutex
	limits map[string]*limit // by function
}

// limit holds an endpoint's requests to its function's max_concurrency,
// so they wait for a kept VM rather than each needing room for a new one.
type limit struct {
	slots   chan struct{} // nil: no bound
	checked time.Time
}

// limitRecheck is how often a function's max_concurrency is read again.
const limitRecheck = 5 * time.Second

// acquire takes one of the function's slots, waiting up to the queue
// timeout; ok is false when none came free (or the caller left).
func (h *functionsHandler) acquire(ctx context.Context, ref string) (release func(), ok bool) {
	fn, _, _ := strings.Cut(ref, ":")
	h.mu.Lock()
	l := h.limits[fn]
	if l == nil || time.Since(l.checked) > limitRecheck {
		n, err := h.t.inv.MaxConcurrency(ctx, fn)
		if l == nil || err == nil && n != cap(l.slots) {
			l = &limit{}
			if err == nil && n > 0 {
				l.slots = make(chan struct{}, n)
			}
			h.limits[fn] = l
		}
		l.checked = time.Now()
	}
	h.mu.Unlock()
	if l.slots == nil {
		return func() {}, true
	}
	wait := time.NewTimer(h.t.cfg.QueueTimeout)
	defer wait.Stop()
	select {
	case l.slots <- struct{}{}:
		return func() { <-l.slots }, true
	case <-wait.C:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}

// FunctionsHandler is the functions listener's handler; it follows the
// endpoints' changes until ctx ends.
func (t *Triggers) FunctionsHandler(ctx context.Context, invokeTimeout time.Duration) (http.Handler, error) {
	h := &functionsHandler{t: t, routes: &routes{}, inflight: make(chan struct{}, t.cfg.MaxInFlight), invokeTimeout: invokeTimeout,
		limits: map[string]*limit{}}
	if err := t.watchEndpoints(ctx, h.routes); err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.routes = h.routes
	t.mu.Unlock()
	return h, nil
}

var traceContext = propagation.TraceContext{}

func (h *functionsHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := httpreq.NewID()
	w.Header().Set(requestIDHeader, id)
	sw := httpreq.NewStatusWriter(w)
	name := "-"
	defer func() { h.t.m.endpointRequest(name, sw.Status, time.Since(start)) }()
	select {
	case h.inflight <- struct{}{}:
		defer func() { <-h.inflight }()
	default:
		sw.Header().Set("Retry-After", "1")
		writeError(sw, http.StatusServiceUnavailable, "busy", "too many requests in progress; retry later")
		return
	}
	if h.carriesAdminToken(r) {
		h.t.log.Warn("functions listener: request with the operator's API token refused", "request_id", id, "remote", r.RemoteAddr, "path", r.URL.Path)
		writeError(sw, http.StatusForbidden, "forbidden", "the operator's API token is not accepted here; endpoints take their own keys")
		return
	}
	ep := h.routes.match(r.URL.Path)
	if ep == nil {
		writeError(sw, http.StatusNotFound, "no_endpoint", "no endpoint serves "+truncate(r.URL.Path, 200))
		return
	}
	name = ep.Name
	if ep.Auth == AuthKey && !keyMatches(presentedKey(r), ep.KeyHash) {
		sw.Header().Set("WWW-Authenticate", `Bearer realm="thaw endpoint"`)
		writeError(sw, http.StatusUnauthorized, "unauthorized", "this endpoint needs its key (Authorization: Bearer KEY, or X-Thaw-Key)")
		return
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, sp := h.t.tracer.Start(ctx, "endpoint "+ep.Name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attribute.String("thaw.endpoint", ep.Name), attribute.String("thaw.function", ep.Function),
			attribute.String("http.request.method", r.Method), attribute.String("thaw.request_id", id)))
	defer func() {
		sp.SetAttributes(attribute.Int("http.response.status_code", sw.Status))
		if sw.Status >= 500 {
			sp.SetStatus(codes.Error, http.StatusText(sw.Status))
		}
		sp.End()
	}()
	h.serveEndpoint(sw, r.WithContext(ctx), ep, id, start)
}

// serveEndpoint reads the body, then queues or invokes, and answers.
func (h *functionsHandler) serveEndpoint(w http.ResponseWriter, r *http.Request, ep *endpointRecord, id string, start time.Time) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyTimeout))
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, h.t.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("request body exceeds %d bytes", h.t.cfg.MaxBodyBytes))
			return
		}
		writeError(w, http.StatusRequestTimeout, "body_unread", "request body not received in time")
		return
	}
	_ = rc.SetReadDeadline(time.Time{})
	event, err := json.Marshal(eventOf(r, body, ep.Name, id, start))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "internal", "event: "+err.Error())
		return
	}
	if len(event) > daemon.MaxEventBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "too_large",
			fmt.Sprintf("the request's event is %d bytes (a body that is not UTF-8 grows by a third in base64); the limit is %d", len(event), daemon.MaxEventBytes))
		return
	}
	switch typ := r.Header.Get(InvocationTypeHeader); strings.ToLower(typ) {
	case "", "sync", "requestresponse":
	case "async", "event":
		acc, err := h.t.Enqueue(r.Context(), EnqueueRequest{Function: ep.Function, Event: event,
			IdempotencyKey: r.Header.Get(IdempotencyKeyHeader), Trace: traceHeaders(r.Context())})
		if err != nil {
			h.fail(w, r, ep, err)
			return
		}
		w.Header().Set(invocationIDHeader, acc.ID)
		writeJSON(w, http.StatusAccepted, acc)
		return
	default:
		writeError(w, http.StatusBadRequest, "invalid", fmt.Sprintf("%s %q: use sync or async", InvocationTypeHeader, truncate(typ, 40)))
		return
	}
	_ = rc.SetWriteDeadline(time.Now().Add(h.t.cfg.QueueTimeout + h.invokeTimeout + 30*time.Second))
	release, ok := h.acquire(r.Context(), ep.Function)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "busy", fmt.Sprintf("the function's %s did not come free in %s; retry later", "VMs", h.t.cfg.QueueTimeout))
		return
	}
	inv, err := h.t.inv.Invoke(r.Context(), ep.Function, event, 0)
	release()
	if err != nil {
		h.fail(w, r, ep, err)
		return
	}
	w.Header().Set(invocationIDHeader, inv.ID)
	if !inv.OK {
		h.functionError(w, ep, inv)
		return
	}
	resp, err := responseOf(inv.Result)
	if err != nil {
		h.t.log.Info("endpoint: function's response is not valid HTTP", "endpoint", ep.Name, "invocation", inv.ID, "err", err)
		writeError(w, http.StatusBadGateway, "bad_response", "the function's response is not valid: "+err.Error())
		return
	}
	for k, v := range resp.header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.status)
	_, _ = w.Write(resp.body)
}

// functionError answers a handler that raised: 502, with the error's
// type, message and traceback only if the endpoint exposes errors.
func (h *functionsHandler) functionError(w http.ResponseWriter, ep *endpointRecord, inv *wire.Invocation) {
	var b struct {
		Error struct {
			wire.ErrorDetail
			Function *wire.FunctionError `json:"function_error,omitempty"`
		} `json:"error"`
	}
	b.Error.Code, b.Error.Message, b.Error.RequestID = "function_error", "the function failed", w.Header().Get(requestIDHeader)
	if ep.ExposeErrors {
		b.Error.Function = inv.Error
	}
	writeJSON(w, http.StatusBadGateway, b)
}

// fail answers a platform error: 503 with Retry-After when there is no
// room (or the engine is unavailable), 504 on the function's timeout.
func (h *functionsHandler) fail(w http.ResponseWriter, r *http.Request, ep *endpointRecord, err error) {
	status, code, msg := http.StatusInternalServerError, "internal", "internal error"
	switch {
	case errors.Is(err, daemon.ErrTooMany) || errors.Is(err, ErrEngine):
		status, code, msg = http.StatusServiceUnavailable, "unavailable", "no room to run the function now; retry later"
		w.Header().Set("Retry-After", "1")
	case errors.Is(err, daemon.ErrTimeout):
		status, code, msg = http.StatusGatewayTimeout, "timeout", "the function did not answer in time"
	case errors.Is(err, daemon.ErrInvalid):
		status, code, msg = http.StatusBadRequest, "invalid", err.Error()
	case errors.Is(err, daemon.ErrNotFound):
		status, code, msg = http.StatusNotFound, "function_not_found", "the endpoint's function "+ep.Function+" does not exist"
	case errors.Is(err, daemon.ErrVMFailed):
		status, code, msg = http.StatusBadGateway, "function_failed", "the function's VM failed"
	case errors.Is(err, context.Canceled):
		status, code, msg = 499, "canceled", "request canceled"
	}
	lvl := slog.LevelInfo
	if status == http.StatusInternalServerError {
		lvl = slog.LevelError
	}
	h.t.log.Log(r.Context(), lvl, "endpoint request failed", "endpoint", ep.Name, "request_id", w.Header().Get(requestIDHeader), "status", status, "err", err)
	writeError(w, status, code, msg)
}

// carriesAdminToken says whether a request presents the operator's API
// token, in any of the places a credential goes (compared in constant
// time).
func (h *functionsHandler) carriesAdminToken(r *http.Request) bool {
	tok := h.t.cfg.AdminToken
	if tok == "" {
		return false
	}
	for _, v := range []string{bearer(r), r.Header.Get(KeyHeader)} {
		if v != "" && subtle.ConstantTimeCompare([]byte(v), []byte(tok)) == 1 {
			return true
		}
	}
	return false
}

// presentedKey is the key a request presents: X-Thaw-Key, else a bearer
// credential.
func presentedKey(r *http.Request) string {
	if k := r.Header.Get(KeyHeader); k != "" {
		return k
	}
	return bearer(r)
}

func bearer(r *http.Request) string {
	a := r.Header.Get("Authorization")
	if len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		return strings.TrimSpace(a[7:])
	}
	return ""
}

// traceHeaders is ctx's trace as W3C headers, to carry it over the queue.
func traceHeaders(ctx context.Context) map[string]string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b wire.Error
	b.Error.Code, b.Error.Message, b.Error.RequestID = code, msg, w.Header().Get(requestIDHeader)
	writeJSON(w, status, b)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
