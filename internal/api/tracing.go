package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName names the API's tracer (its instrumentation scope).
const TracerName = "github.com/thaw-dev/thaw/internal/api"

// AttrRequestID is the request span's attribute carrying the request's
// id (X-Request-Id).
const AttrRequestID = attribute.Key("thaw.request_id")

// metricsRoute is the metrics scrape's route, not traced.
const metricsRoute = "GET /metrics"

// traceContext reads the W3C traceparent and tracestate headers.
var traceContext = propagation.TraceContext{}

// startSpan starts the request's span, named by its route pattern
// ("POST /v1/functions/{name}/invoke"; the method alone for unknown paths),
// at start, and puts it in the request's context. An admitted request
// joins the caller's trace if it carries a traceparent header; a refused
// one starts a trace of its own (an unauthenticated caller does not choose
// what is sampled). Without a tracer provider there is no span: the
// context keeps the no-op one; nor for metrics scrapes, a trace every
// scrape interval that says nothing.
func (h *Handler) startSpan(r *http.Request, pattern, id string, start time.Time, admitted bool) (*http.Request, trace.Span) {
	if h.tracer == nil || pattern == metricsRoute {
		return r, trace.SpanFromContext(r.Context())
	}
	ctx := r.Context()
	if admitted {
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	name := pattern
	if name == "" {
		name = r.Method
	}
	attrs := []attribute.KeyValue{semconv.HTTPRequestMethodKey.String(r.Method), semconv.URLPath(r.URL.Path), AttrRequestID.String(id)}
	if _, route, ok := strings.Cut(pattern, " "); ok {
		attrs = append(attrs, semconv.HTTPRoute(route))
	}
	ctx, sp := h.tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	return r.WithContext(ctx), sp
}

// endSpan ends a request's span with the status answered.
func endSpan(sp trace.Span, status int) {
	sp.SetAttributes(semconv.HTTPResponseStatusCode(status))
	sp.End()
}

// failSpan records a request's failure on its span; a server-side one
// (5xx) is the span's error, a client's (4xx) is not.
func failSpan(ctx context.Context, status int, err error) {
	sp := trace.SpanFromContext(ctx)
	sp.RecordError(err)
	if status >= 500 {
		sp.SetStatus(codes.Error, err.Error())
	}
}

// logAttrs name a request in log lines: its id, and its trace's id when
// its span is sampled (exported), to find the trace from the line.
func logAttrs(ctx context.Context, id string) []any {
	if sc := trace.SpanContextFromContext(ctx); sc.IsSampled() {
		return []any{"request_id", id, "trace_id", sc.TraceID().String()}
	}
	return []any{"request_id", id}
}
