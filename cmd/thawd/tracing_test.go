package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/telemetry/otlptest"
)

// socketServe starts thawd's serve path (daemon on TCG, no VM booted) on
// a Unix socket and returns a client for it.
func socketServe(t *testing.T) (*running, *http.Client) {
	t.Helper()
	sock, d := socketDaemon(t, "thawd-trace-")
	return startServe(t, serveConfig{Listen: []string{sock}, Daemon: d}), unixHTTP(sock)
}

// call sends one request to thawd, with a traceparent if given, and
// returns the status and the request's id.
func call(t *testing.T, c *http.Client, method, path, traceparent string) (int, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost {
		body = strings.NewReader(`{}`)
	}
	req, _ := http.NewRequest(method, "http://thawd"+path, body)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("X-Request-Id")
}

// With OTEL_EXPORTER_OTLP_ENDPOINT set, thawd exports its spans over
// OTLP/HTTP: a span per request, in the caller's trace when it sent a
// traceparent, with the service's step spans beneath it, all flushed when
// thawd stops.
func TestServeExportsSpans(t *testing.T) {
	rcv := otlptest.New()
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_TRACES_SAMPLER", "")
	r, c := socketServe(t)

	const callerTrace, callerSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	infoStatus, infoID := call(t, c, "GET", "/v1/info", "")
	verifyStatus, verifyID := call(t, c, "POST", "/v1/snapshots/snap-0123456789ab/verify", "00-"+callerTrace+"-"+callerSpan+"-01")
	if infoStatus != 200 || verifyStatus != 404 {
		t.Fatalf("info %d, verify of a missing snapshot %d", infoStatus, verifyStatus)
	}
	r.shutdown(t) // flushes

	if n, errs := rcv.Requests(); n == 0 || len(errs) > 0 {
		t.Fatalf("%d export requests, errors %v", n, errs)
	}
	byRequest := map[string]otlptest.Span{}
	var verify *otlptest.Span
	for _, sp := range rcv.Spans() {
		if id := sp.Attr("thaw.request_id"); id != "" {
			byRequest[id] = sp
		}
		if sp.Name == daemon.SpanVerify {
			verify = &sp
		}
		if sp.Resource["service.name"] != "thawd" || sp.Resource["service.version"] != buildinfo.Version {
			t.Errorf("span %q from resource %v", sp.Name, sp.Resource)
		}
	}
	info, ok := byRequest[infoID]
	if !ok || info.Name != "GET /v1/info" || info.Attr("http.response.status_code") != "200" || info.Attr("http.request.method") != "GET" {
		t.Errorf("GET /v1/info (%s): span %v", infoID, info.Span)
	}
	req, ok := byRequest[verifyID]
	if !ok || req.Name != "POST /v1/snapshots/{id}/verify" || req.Attr("http.response.status_code") != "404" {
		t.Fatalf("verify (%s): span %v", verifyID, req.Span)
	}
	if req.TraceID() != callerTrace || req.ParentID() != callerSpan {
		t.Errorf("the request span is in trace %s under %s, want the caller's %s under %s", req.TraceID(), req.ParentID(), callerTrace, callerSpan)
	}
	// The service's step, beneath the request, failed: no such snapshot.
	if verify == nil {
		t.Fatal("no verify span")
	}
	if verify.TraceID() != callerTrace || verify.ParentID() != req.SpanID() || verify.Attr("thaw.snapshot") != "snap-0123456789ab" {
		t.Errorf("verify span in trace %s under %s (%v), want under the request span %s", verify.TraceID(), verify.ParentID(), verify.Attributes, req.SpanID())
	}
	if verify.GetStatus().GetCode() != 2 { // STATUS_CODE_ERROR
		t.Errorf("verify of a missing snapshot: status %v", verify.GetStatus())
	}
}

// Without an OTLP endpoint thawd exports nothing, whatever callers send.
// The receiver listens where an exporter sends by default
// (127.0.0.1:4318), so an exporter installed without the variable would
// be caught.
func TestServeExportsNothingByDefault(t *testing.T) {
	rcv, err := otlptest.NewAt("127.0.0.1:4318")
	if err != nil {
		t.Skipf("the OTLP default address is taken, so an exporter sending there could not be seen: %v", err)
	}
	defer rcv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	t.Setenv("OTEL_SERVICE_NAME", "thawd-untraced")
	r, c := socketServe(t)
	for i := 0; i < 3; i++ {
		if st, _ := call(t, c, "GET", "/v1/info", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"); st != 200 {
			t.Fatalf("info %d", st)
		}
		call(t, c, "POST", "/v1/snapshots/snap-0123456789ab/verify", "")
	}
	r.shutdown(t)
	if n := rcv.Connections(); n != 0 {
		t.Errorf("%d connections reached the receiver without an endpoint configured", n)
	}
}
