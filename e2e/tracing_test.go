package e2e

import (
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/telemetry/spantest"
)

// traceparentTransport sends a caller's traceparent with every request.
type traceparentTransport struct {
	base        http.RoundTripper
	traceparent string
}

func (t *traceparentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("traceparent", t.traceparent)
	return t.base.RoundTrip(r)
}

// A cold start on a real VM is one trace: the request span in the
// caller's trace, its steps beneath it in order, each as long as the
// invocation's own timing says.
func TestColdStartTrace(t *testing.T) {
	parallel(t)
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	e := startEnvWith(t, t.TempDir(), func(c *daemon.Config) { c.TracerProvider = tp })
	ctx := ctxT(t)
	snap := helloSnapshot(t, e.c, 256)

	const callerTrace, callerSpan = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174"
	c := client.New(e.srv.URL, client.WithToken(e.token), client.WithRoundTripper(func(rt http.RoundTripper) http.RoundTripper {
		return &traceparentTransport{base: rt, traceparent: "00-" + callerTrace + "-" + callerSpan + "-01"}
	}))
	inv, err := c.InvokeSnapshot(ctx, snap.ID, json.RawMessage(`{"name":"trace"}`), client.InvokeOptions{Strategy: "vanilla"})
	if err != nil || !inv.OK || inv.Mode != "cold" {
		t.Fatalf("cold: %v %+v", err, inv)
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}

	var req sdktrace.ReadOnlySpan
	for _, sp := range sr.Ended() {
		if sp.SpanContext().TraceID().String() == callerTrace && sp.Parent().SpanID().String() == callerSpan {
			req = sp
		}
	}
	if req == nil || req.Name() != "POST /v1/snapshots/{id}/invoke" {
		t.Fatalf("no request span in the caller's trace (%v)", req)
	}
	steps := spantest.Children(sr.Ended(), req.SpanContext().SpanID())
	var got []string
	for _, sp := range steps {
		got = append(got, sp.Name())
		for _, kv := range sp.Attributes() {
			if kv.Key == daemon.AttrVM && sp.Name() != daemon.SpanAdmission && sp.Name() != daemon.SpanVerify && kv.Value.AsString() != inv.VM {
				t.Errorf("span %q names vm %s, not %s", sp.Name(), kv.Value.AsString(), inv.VM)
			}
		}
	}
	want := []string{daemon.SpanAdmission, daemon.SpanVerify, daemon.SpanStrategy, daemon.SpanVMMStart, daemon.SpanStateLoad,
		daemon.SpanResume, daemon.SpanInvoke, daemon.SpanTeardown}
	if !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v", got, want)
	}
	// Each step lasts what the invocation's timing says it did.
	rt := inv.Timing.Restore
	for i, ms := range []float64{3: rt.VMMStartMS, 4: rt.LoadStateMS, 5: rt.ResumeMS, 6: inv.Timing.InvokeMS, 7: inv.Timing.TeardownMS} {
		if i < 3 {
			continue // admission, verify, strategy setup: verify_ms counts from the request, not the span
		}
		d := float64(steps[i].EndTime().Sub(steps[i].StartTime()).Microseconds()) / 1000
		// The span covers the timed step (resume's also QEMU's cont,
		// which its timing starts after), and not much more.
		if d < ms-math.Max(5, ms/10) || d > ms+math.Max(50, ms/2) {
			t.Errorf("span %q lasted %.1f ms, the timing says %.1f ms", steps[i].Name(), d, ms)
		}
		t.Logf("%-14s %8.1f ms (timing %8.1f ms)", steps[i].Name(), d, ms)
	}
	if total := float64(req.EndTime().Sub(req.StartTime()).Microseconds()) / 1000; total < inv.Timing.TotalMS {
		t.Errorf("the request span (%.1f ms) is shorter than the invocation (%.1f ms)", total, inv.Timing.TotalMS)
	}
}
