// Package telemetry sets up thawd's OpenTelemetry tracing from the
// standard OTEL_* environment: spans go to an OTLP/HTTP collector when an
// endpoint is configured, and nowhere (no provider at all) otherwise.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/thaw-dev/thaw/internal/buildinfo"
)

// ServiceName is the service.name of thawd's spans unless OTEL_SERVICE_NAME
// (or service.name in OTEL_RESOURCE_ATTRIBUTES) says otherwise.
const ServiceName = "thawd"

// Tracing is thawd's tracer provider; a nil *Tracing traces nothing.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// Provider is the tracer provider, nil when tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.provider
}

// Shutdown exports the spans still queued and stops the exporter; nothing
// when tracing is off.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flush spans: %w", err)
	}
	return nil
}

// Enabled says whether getenv asks for spans to be exported: an OTLP
// endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT),
// neither OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none.
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || strings.EqualFold(getenv("OTEL_TRACES_EXPORTER"), "none") {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// check reports every OTEL_* setting thawd cannot honour: it exports
// OTLP over HTTP with protobuf only.
func check(getenv func(string) string) error {
	var errs []error
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		errs = append(errs, fmt.Errorf("OTEL_TRACES_EXPORTER=%s: thawd exports otlp (or none)", e))
	}
	for _, name := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if p := getenv(name); p != "" && p != "http/protobuf" {
			errs = append(errs, fmt.Errorf("%s=%s: thawd exports http/protobuf only", name, p))
		}
	}
	return errors.Join(errs...)
}

// Setup reads the OTEL_* environment. Without an OTLP endpoint it returns
// nil: no provider, no exporter, nothing to flush. With one it builds a
// provider that batches spans to the endpoint over OTLP/HTTP (the
// exporter reads OTEL_EXPORTER_OTLP_* itself: headers, timeout,
// compression, certificates; the provider reads OTEL_TRACES_SAMPLER and
// OTEL_BSP_*), with a resource naming thawd and its version. Export
// failures are logged to log.
func Setup(ctx context.Context, log *slog.Logger) (*Tracing, error) {
	if !Enabled(os.Getenv) {
		return nil, nil
	}
	if err := check(os.Getenv); err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(semconv.ServiceName(ServiceName), semconv.ServiceVersion(buildinfo.Version)),
		resource.WithTelemetrySDK(),
		resource.WithHost(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES: last, so they win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("tracing", "err", err) }))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing", "exporter", "otlp/http", "service", serviceName(res))
	return &Tracing{provider: tp}, nil
}

// serviceName is res's service.name.
func serviceName(res *resource.Resource) string {
	v, _ := res.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}
