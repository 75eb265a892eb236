package triggers

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/wire"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// An endpoint request joins its caller's trace, and so does the run of an
// asynchronous request queued through it: the invoker sees both in the
// caller's trace.
func TestTracesJoinTheCaller(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	inv := newTestInvoker()
	traces := make(chan trace.SpanContext, 4)
	traced := &tracingInvoker{testInvoker: inv, seen: traces}
	inv.set("echo", echo)
	tr := openTest(t, "", traced, func(c *Config) { c.TracerProvider = tp })
	if _, err := tr.CreateEndpoint(context.Background(), wire.CreateEndpointRequest{Function: "echo"}); err != nil {
		t.Fatal(err)
	}
	base := serveFunctions(t, tr)
	const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, async := range []bool{false, true} {
		req := mustReq("POST", base+"/echo", `{}`)
		req.Header.Set("traceparent", caller)
		if async {
			req.Header.Set(InvocationTypeHeader, "async")
		}
		if resp, body := httpDo(t, req); resp.StatusCode/100 != 2 {
			t.Fatalf("async=%v: %d %s", async, resp.StatusCode, body)
		}
		select {
		case sc := <-traces:
			if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" {
				t.Fatalf("async=%v: the invocation ran in trace %s, not the caller's", async, sc.TraceID())
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("async=%v: no invocation", async)
		}
	}
	names := map[string]bool{}
	for _, s := range sr.Ended() {
		names[s.Name()] = true
	}
	if !names["endpoint echo"] || !names["async echo"] {
		t.Fatalf("spans %v", names)
	}
}

// tracingInvoker reports the span context each invocation ran in.
type tracingInvoker struct {
	*testInvoker
	seen chan trace.SpanContext
}

func (ti *tracingInvoker) Invoke(ctx context.Context, ref string, event json.RawMessage, d time.Duration) (*wire.Invocation, error) {
	ti.seen <- trace.SpanContextFromContext(ctx)
	return ti.testInvoker.Invoke(ctx, ref, event, d)
}
