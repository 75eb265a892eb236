package daemon

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing: the service's steps are spans, children of the caller's span
// in ctx (the API's request span). docs/operations.md ("Tracing") lists
// them with their attributes.

// TracerName names the service's tracer (its instrumentation scope).
const TracerName = "github.com/thaw-dev/thaw/internal/daemon"

// Span names.
const (
	SpanAdmission = "admission"      // waiting for room for a VM
	SpanVerify    = "verify"         // snapshot verification
	SpanStrategy  = "strategy setup" // the restore strategy's session, before the VMM starts
	SpanVMMStart  = "vmm start"      // VMM process start to its monitor ready (and the strategy attached)
	SpanStateLoad = "state load"     // device state loaded (incoming migration)
	SpanResume    = "resume"         // vCPUs resumed to the guest renewed and answering
	SpanInvoke    = "invoke"         // the guest agent's invocation round trip
	SpanTeardown  = "teardown"       // VMM killed, its resources freed
	SpanBoot      = "boot"           // a VM booted from the guest image
	SpanSnapshot  = "snapshot"       // a VM snapshotted
	SpanPrepare   = "prepare"        // a function prepared (clean and warm snapshots, artifacts)
	SpanDeploy    = "deploy"         // a function version built, booted, snapshotted and published
)

// Span attributes.
const (
	AttrFunction     = attribute.Key("thaw.function")
	AttrSnapshot     = attribute.Key("thaw.snapshot")
	AttrVM           = attribute.Key("thaw.vm")
	AttrStrategy     = attribute.Key("thaw.strategy") // the strategy that runs (vanilla after a fallback)
	AttrMode         = attribute.Key("thaw.mode")     // cold, warm or pooled
	AttrVMM          = attribute.Key("thaw.vmm")      // started for the restore, or pooled (started ahead)
	AttrInvocation   = attribute.Key("thaw.invocation")
	AttrInvocationOK = attribute.Key("thaw.invocation.ok") // false: the handler raised (not a span error)
	AttrVerifyFull   = attribute.Key("thaw.verify.full")   // the memory file re-hashed whatever its stamp
	AttrVMState      = attribute.Key("thaw.vm.state")      // the state teardown leaves the VM in
	AttrReason       = attribute.Key("thaw.reason")        // why the VM was torn down
)

// newTracer is the service's tracer from tp (nil: a no-op one).
func newTracer(tp trace.TracerProvider) trace.Tracer {
	if tp == nil {
		tp = noop.NewTracerProvider()
	}
	return tp.Tracer(TracerName)
}

// span starts a child span of ctx's span.
func (s *Service) span(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return s.tracer.Start(ctx, name, trace.WithAttributes(attrs...))
}

// endSpan ends sp, recording err (if any) as its error.
func endSpan(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// annotate adds attributes to ctx's span (the request's).
func annotate(ctx context.Context, attrs ...attribute.KeyValue) {
	trace.SpanFromContext(ctx).SetAttributes(attrs...)
}
