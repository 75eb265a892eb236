package telemetry

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/buildinfo"
	"github.com/thaw-dev/thaw/internal/telemetry/otlptest"
)

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// unsetOTel clears every OTEL_* variable these tests read, for the test.
func unsetOTel(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_SDK_DISABLED",
		"OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "OTEL_SERVICE_NAME",
		"OTEL_RESOURCE_ATTRIBUTES", "OTEL_TRACES_SAMPLER", "OTEL_TRACES_SAMPLER_ARG"} {
		t.Setenv(k, "")
	}
}

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "TRUE"}, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
		{map[string]string{"OTEL_SERVICE_NAME": "thawd-a", "OTEL_TRACES_EXPORTER": "otlp"}, false},
	} {
		if got := Enabled(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: enabled %v, want %v", c.env, got, c.want)
		}
	}
}

// Without an endpoint there is no provider and nothing to flush.
func TestSetupOff(t *testing.T) {
	unsetOTel(t)
	tr, err := Setup(context.Background(), discard)
	if err != nil || tr != nil || tr.Provider() != nil {
		t.Fatalf("%v %v", tr, err)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// Settings thawd cannot honour stop it, all named at once.
func TestSetupRefuses(t *testing.T) {
	unsetOTel(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	_, err := Setup(context.Background(), discard)
	if err == nil || !strings.Contains(err.Error(), "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") || !strings.Contains(err.Error(), "OTEL_TRACES_EXPORTER=zipkin") {
		t.Fatalf("%v", err)
	}
}

// With an endpoint, spans reach it over OTLP/HTTP by Shutdown, from a
// resource naming thawd (or OTEL_SERVICE_NAME) and its version.
func TestSetupExports(t *testing.T) {
	for _, c := range []struct{ env, want string }{{"", ServiceName}, {"thawd-blue", "thawd-blue"}} {
		unsetOTel(t)
		rcv := otlptest.New()
		defer rcv.Close()
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
		t.Setenv("OTEL_SERVICE_NAME", c.env)
		tr, err := Setup(context.Background(), discard)
		if err != nil || tr == nil {
			t.Fatalf("%v %v", tr, err)
		}
		_, sp := tr.Provider().Tracer("test").Start(context.Background(), "work")
		sp.End()
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		spans := rcv.Spans()
		if len(spans) != 1 || spans[0].Name != "work" {
			t.Fatalf("received %v", spans)
		}
		res := spans[0].Resource
		if res["service.name"] != c.want || res["service.version"] != buildinfo.Version || res["telemetry.sdk.language"] != "go" {
			t.Errorf("OTEL_SERVICE_NAME=%q: resource %v, want service.name %s", c.env, res, c.want)
		}
	}
}
