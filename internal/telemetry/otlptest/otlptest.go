// Package otlptest is an OTLP/HTTP trace receiver on loopback for tests:
// it decodes the protobuf ExportTraceServiceRequest bodies an exporter
// posts to /v1/traces and keeps their spans.
package otlptest

import (
	"compress/gzip"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one received span with its resource's attributes.
type Span struct {
	*tracepb.Span
	Resource map[string]string
}

// Attr is the span's attribute key as a string ("" if absent).
func (s Span) Attr(key string) string { return attrs(s.Attributes)[key] }

// TraceID and SpanID, ParentID are the span's ids in hex.
func (s Span) TraceID() string  { return hex.EncodeToString(s.Span.TraceId) }
func (s Span) SpanID() string   { return hex.EncodeToString(s.Span.SpanId) }
func (s Span) ParentID() string { return hex.EncodeToString(s.ParentSpanId) }

// Receiver is an OTLP/HTTP receiver on 127.0.0.1.
type Receiver struct {
	URL string // http://127.0.0.1:PORT, for OTEL_EXPORTER_OTLP_ENDPOINT

	srv      *httptest.Server
	mu       sync.Mutex
	spans    []Span
	requests int
	conns    int
	errs     []string
}

// New starts a receiver on a free port; Close stops it.
func New() *Receiver {
	r := &Receiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.start()
	return r
}

// NewAt starts a receiver on addr (a loopback host:port).
func NewAt(addr string) (*Receiver, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &Receiver{}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(r.serve))
	r.srv.Listener.Close()
	r.srv.Listener = ln
	r.start()
	return r, nil
}

// start serves, counting every connection (an exporter speaking TLS to
// this plain-HTTP receiver connects and fails before any request).
func (r *Receiver) start() {
	r.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			r.mu.Lock()
			r.conns++
			r.mu.Unlock()
		}
	}
	r.srv.Start()
	r.URL = r.srv.URL
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := r.read(req)
	var msg coltracepb.ExportTraceServiceRequest
	if err == nil {
		err = proto.Unmarshal(body, &msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	if err != nil {
		r.errs = append(r.errs, err.Error())
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	for _, rs := range msg.ResourceSpans {
		res := attrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.ScopeSpans {
			for _, sp := range ss.Spans {
				r.spans = append(r.spans, Span{Span: sp, Resource: res})
			}
		}
	}
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

// read is a request's body, checked to be what an OTLP/HTTP exporter
// sends: POST /v1/traces, protobuf, gzip or not.
func (r *Receiver) read(req *http.Request) ([]byte, error) {
	if req.Method != http.MethodPost || req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
		return nil, &badRequest{req.Method + " " + req.URL.Path + " " + req.Header.Get("Content-Type")}
	}
	var rd io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			return nil, err
		}
		rd = gz
	}
	return io.ReadAll(rd)
}

type badRequest struct{ what string }

func (e *badRequest) Error() string { return "not an OTLP/HTTP protobuf trace export: " + e.what }

// Spans are the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Requests is how many requests arrived, and the errors of those that
// were not trace exports.
func (r *Receiver) Requests() (int, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.requests, append([]string(nil), r.errs...)
}

// Connections is how many connections were opened to the receiver.
func (r *Receiver) Connections() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns
}

// attrs flattens OTLP attributes to strings (scalars only).
func attrs(kvs []*commonpb.KeyValue) map[string]string {
	m := map[string]string{}
	for _, kv := range kvs {
		v := kv.GetValue()
		switch x := v.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			m[kv.Key] = x.StringValue
		case *commonpb.AnyValue_IntValue:
			m[kv.Key] = strconv.FormatInt(x.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			m[kv.Key] = strconv.FormatBool(x.BoolValue)
		}
	}
	return m
}
