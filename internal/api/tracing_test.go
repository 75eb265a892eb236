package api

import (
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/logtest"
	"github.com/thaw-dev/thaw/internal/telemetry/spantest"
)

// A caller's trace: traceparent's trace and span ids.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	callerSpan  = "00f067aa0ba902b7"
)

// syncBuffer is a log sink for one handler's concurrent requests.
type syncBuffer struct{ logtest.Buffer }

// lines are the JSON log lines written so far whose msg is msg.
func (s *syncBuffer) lines(t *testing.T, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		if m["msg"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// tracedHandler is the real handler (guard, spans, errors, logs) with a
// route, POST /v1/functions/{name}/invoke, that fails as its name says:
// "missing" with 404, anything else with 500. The route notes the span
// it runs in (in *inSpan).
func tracedHandler(tp trace.TracerProvider, inSpan *trace.SpanContext) (*Handler, *syncBuffer) {
	logs := &syncBuffer{}
	h := NewServices(noDaemon(), slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), Options{Token: testToken, TracerProvider: tp})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/functions/{name}/invoke", func(w http.ResponseWriter, r *http.Request) {
		*inSpan = trace.SpanContextFromContext(r.Context())
		err := errors.New("the disk is on fire")
		if r.PathValue("name") == "missing" {
			err = daemon.ErrNotFound
		}
		h.fail(w, r, err)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("thaw_vms 0\n")) })
	h.mux = mux
	return h, logs
}

// onlySpan is the one span sr recorded since the last call.
func onlySpan(t *testing.T, sr *tracetest.SpanRecorder, seen *int) sdktrace.ReadOnlySpan {
	t.Helper()
	ended := sr.Ended()[*seen:]
	*seen += len(ended)
	if len(ended) != 1 {
		t.Fatalf("%d spans recorded for one request, want 1", len(ended))
	}
	return ended[0]
}

// Every request is a server span named by its route: it joins the trace
// of an admitted caller's traceparent, carries method, route, path,
// status and request id, is an error only for 5xx, and the request's log
// lines name its trace.
func TestRequestSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	var inSpan trace.SpanContext
	h, logs := tracedHandler(tp, &inSpan)
	seen := 0

	checkCallerSpan(t, h, sr, logs, &seen, &inSpan)

	// 5xx: the span is an error, and the failure's log line names the trace.
	w := serveOne(h, localRequest("POST", "/v1/functions/echo/invoke", "application/json", `{}`))
	sp := onlySpan(t, sr, &seen)
	if w.Code != http.StatusInternalServerError || sp.Status().Code != codes.Error || !strings.Contains(sp.Status().Description, "the disk is on fire") {
		t.Errorf("500: %d, span status %+v", w.Code, sp.Status())
	}
	if sp.Parent().IsValid() {
		t.Errorf("a request without traceparent has parent %s", sp.Parent().SpanID())
	}
	failed := logs.lines(t, "request failed")
	if len(failed) != 1 || failed[0]["trace_id"] != sp.SpanContext().TraceID().String() || failed[0]["request_id"] != w.Header().Get(RequestIDHeader) {
		t.Errorf("failure log lines %v, want one naming request %s and trace %s", failed, w.Header().Get(RequestIDHeader), sp.SpanContext().TraceID())
	}

	// A refused caller does not choose the trace.
	r := localRequest("POST", "/v1/functions/echo/invoke", "application/json", `{}`)
	r.Header.Set("Authorization", "Bearer wrong")
	r.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	w = serveOne(h, r)
	sp = onlySpan(t, sr, &seen)
	if w.Code != http.StatusUnauthorized || sp.SpanContext().TraceID().String() == callerTrace || sp.Parent().IsValid() {
		t.Errorf("refused: %d, span in trace %s under %s, want a trace of its own", w.Code, sp.SpanContext().TraceID(), sp.Parent().SpanID())
	}
	if l := logs.lines(t, "request refused"); len(l) != 1 || l[0]["trace_id"] != sp.SpanContext().TraceID().String() {
		t.Errorf("refusal log lines %v", l)
	}

	// An unknown path: the method alone names the span.
	w = serveOne(h, localRequest("GET", "/v1/nothing", "", ""))
	sp = onlySpan(t, sr, &seen)
	if w.Code != http.StatusNotFound || sp.Name() != "GET" || spantest.Attrs(sp)["http.route"] != "" || spantest.Attrs(sp)["http.response.status_code"] != "404" {
		t.Errorf("unknown path: %d, span %q %v", w.Code, sp.Name(), spantest.Attrs(sp))
	}

	// Metrics scrapes are not traced.
	if w := serveOne(h, localRequest("GET", "/metrics", "", "")); w.Code != http.StatusOK {
		t.Fatalf("metrics: %d %s", w.Code, w.Body)
	}
	if n := len(sr.Ended()); n != seen {
		t.Errorf("%d spans recorded for a metrics scrape", n-seen)
	}

	// A caller's unsampled trace is not sampled here either: no span, no
	// trace id in the log lines.
	r = localRequest("POST", "/v1/functions/missing/invoke", "application/json", `{}`)
	r.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-00")
	before := len(logs.lines(t, "request"))
	serveOne(h, r)
	if n := len(sr.Ended()); n != seen {
		t.Errorf("%d spans recorded for an unsampled trace", n-seen)
	}
	if l := logs.lines(t, "request"); len(l) != before+1 || l[before]["trace_id"] != nil {
		t.Errorf("unsampled request's log lines %v, want one without trace_id", l[before:])
	}
}

// checkCallerSpan sends a request that joins an admitted caller's trace and
// gets a 404: its server span, named by the route, is under the caller's
// span, carries the request's attributes, is no error but records one,
// and the request's log line names the trace.
func checkCallerSpan(t *testing.T, h *Handler, sr *tracetest.SpanRecorder, logs *syncBuffer, seen *int, inSpan *trace.SpanContext) {
	t.Helper()
	r := localRequest("POST", "/v1/functions/missing/invoke", "application/json", `{}`)
	r.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	w := serveOne(h, r)
	if w.Code != http.StatusNotFound {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	sp := onlySpan(t, sr, seen)
	if !inSpan.Equal(sp.SpanContext()) {
		t.Errorf("the route ran in span %s, not the request's %s", inSpan.SpanID(), sp.SpanContext().SpanID())
	}
	if sp.Name() != "POST /v1/functions/{name}/invoke" || sp.SpanKind() != trace.SpanKindServer {
		t.Errorf("span %q kind %v", sp.Name(), sp.SpanKind())
	}
	if sp.SpanContext().TraceID().String() != callerTrace || sp.Parent().SpanID().String() != callerSpan || !sp.Parent().IsRemote() {
		t.Errorf("span in trace %s under %s, want the caller's %s under %s", sp.SpanContext().TraceID(), sp.Parent().SpanID(), callerTrace, callerSpan)
	}
	a := spantest.Attrs(sp)
	for k, v := range map[attribute.Key]string{"http.request.method": "POST", "http.route": "/v1/functions/{name}/invoke",
		"url.path": "/v1/functions/missing/invoke", "http.response.status_code": "404", AttrRequestID: w.Header().Get(RequestIDHeader)} {
		if a[k] != v {
			t.Errorf("%s = %q, want %q", k, a[k], v)
		}
	}
	if sp.Status().Code != codes.Unset || !spantest.RecordedException(sp) {
		t.Errorf("404: status %+v, exception recorded %v; want no error status and the error recorded", sp.Status(), spantest.RecordedException(sp))
	}
	if l := logs.lines(t, "request"); len(l) != 1 || l[0]["trace_id"] != callerTrace || l[0]["request_id"] != w.Header().Get(RequestIDHeader) {
		t.Errorf("request log lines %v, want one naming the request and trace %s", l, callerTrace)
	}
}

// Without a tracer provider nothing is traced: a caller's traceparent is
// not even read, and log lines name no trace.
func TestRequestsUntraced(t *testing.T) {
	var inSpan trace.SpanContext
	h, logs := tracedHandler(nil, &inSpan)
	if h.tracer != nil {
		t.Fatal("a tracer without a provider")
	}
	r := localRequest("POST", "/v1/functions/echo/invoke", "application/json", `{}`)
	r.Header.Set("traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	if w := serveOne(h, r); w.Code != http.StatusInternalServerError {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	if inSpan.IsValid() {
		t.Errorf("the route ran in span %s of trace %s", inSpan.SpanID(), inSpan.TraceID())
	}
	for _, msg := range []string{"request failed", "request"} {
		l := logs.lines(t, msg)
		if len(l) != 1 || l[0]["request_id"] == nil || l[0]["trace_id"] != nil {
			t.Errorf("%s: log lines %v, want one with request_id and no trace_id", msg, l)
		}
	}
}
