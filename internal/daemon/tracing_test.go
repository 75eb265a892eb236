package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/telemetry/spantest"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// tracedService is fakeService with its spans recorded in memory.
func tracedService(t *testing.T, edit func(*Config)) (*Service, *vmmtest.Fake, *sdktrace.TracerProvider, *tracetest.SpanRecorder) {
	t.Helper()
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	s, b := fakeService(t, func(c *Config) {
		c.TracerProvider = tp
		if edit != nil {
			edit(c)
		}
	})
	return s, b, tp, sr
}

// request runs op under a span standing for the API's request span and
// returns that span's children, in the order they started.
func request(t *testing.T, tp trace.TracerProvider, sr *tracetest.SpanRecorder, op func(ctx context.Context)) (sdktrace.ReadOnlySpan, []sdktrace.ReadOnlySpan) {
	t.Helper()
	ctx, sp := tp.Tracer("test").Start(context.Background(), "request")
	op(ctx)
	sp.End()
	var req sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.SpanContext().SpanID() == sp.SpanContext().SpanID() {
			req = s
		}
	}
	if req == nil {
		t.Fatal("the request span was not recorded")
	}
	children := spantest.Children(sr.Ended(), sp.SpanContext().SpanID())
	for _, c := range children {
		if c.SpanContext().TraceID() != sp.SpanContext().TraceID() {
			t.Errorf("span %q is in trace %s, not the request's", c.Name(), c.SpanContext().TraceID())
		}
	}
	return req, children
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}

// wantAttrs checks that span s has every attribute of want (key, value, ...).
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want ...string) {
	t.Helper()
	got := spantest.Attrs(s)
	for i := 0; i+1 < len(want); i += 2 {
		if v, ok := got[attribute.Key(want[i])]; !ok || v != want[i+1] {
			t.Errorf("span %q: %s = %q (set %v), want %q", s.Name(), want[i], v, ok, want[i+1])
		}
	}
}

// wantError checks that s ended as an error whose message contains msg,
// recorded as an exception event.
func wantError(t *testing.T, s sdktrace.ReadOnlySpan, msg string) {
	t.Helper()
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, msg) {
		t.Errorf("span %q status %+v, want an error mentioning %q", s.Name(), s.Status(), msg)
	}
	if !spantest.RecordedException(s) {
		t.Errorf("span %q recorded no exception event", s.Name())
	}
}

// A cold invocation's steps are children of the request's span, in order,
// each naming the VM, function, snapshot and strategy; a warm one is one
// invoke span.
func TestColdPathSpans(t *testing.T) {
	s, _, tp, sr := tracedService(t, func(c *Config) { c.KeepAlive = -1 })
	vm, sn := bootAndSnapshot(t, s, "echo")

	var inv *Invocation
	req, spans := request(t, tp, sr, func(ctx context.Context) {
		var err error
		inv, err = s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(`"cold"`)}})
		if err != nil || !inv.OK {
			t.Fatalf("cold: %v %+v", err, inv)
		}
	})
	want := []string{SpanAdmission, SpanVerify, SpanStrategy, SpanVMMStart, SpanStateLoad, SpanResume, SpanInvoke, SpanTeardown}
	if got := names(spans); !slices.Equal(got, want) {
		t.Fatalf("children of the request span: %v, want %v", got, want)
	}
	for _, sp := range spans {
		if sp.Status().Code != codes.Unset {
			t.Errorf("span %q: status %+v on a path that worked", sp.Name(), sp.Status())
		}
		if sp.EndTime().Before(sp.StartTime()) || sp.EndTime().After(req.EndTime()) {
			t.Errorf("span %q ends outside its request", sp.Name())
		}
	}
	for i := 1; i < len(spans); i++ {
		if spans[i].StartTime().Before(spans[i-1].EndTime()) {
			t.Errorf("span %q starts before %q ends: the steps are sequential", spans[i].Name(), spans[i-1].Name())
		}
	}
	wantAttrs(t, spans[0], "thaw.function", "echo")
	wantAttrs(t, spans[1], "thaw.snapshot", sn.ID, "thaw.function", "echo", "thaw.verify.full", "false")
	wantAttrs(t, spans[2], "thaw.vm", inv.VM, "thaw.strategy", inv.Strategy, "thaw.snapshot", sn.ID)
	for _, sp := range spans[3:6] {
		wantAttrs(t, sp, "thaw.vm", inv.VM, "thaw.function", "echo", "thaw.snapshot", sn.ID, "thaw.strategy", inv.Strategy)
	}
	wantAttrs(t, spans[6], "thaw.vm", inv.VM, "thaw.function", "echo", "thaw.snapshot", sn.ID, "thaw.strategy", inv.Strategy,
		"thaw.mode", "cold", "thaw.invocation", inv.ID, "thaw.invocation.ok", "true")
	wantAttrs(t, spans[7], "thaw.vm", inv.VM, "thaw.vm.state", "stopped", "thaw.reason", "cold invocation finished")
	wantAttrs(t, req, "thaw.function", "echo", "thaw.vm", inv.VM, "thaw.mode", "cold", "thaw.invocation", inv.ID,
		"thaw.snapshot", sn.ID, "thaw.strategy", inv.Strategy)

	_, spans = request(t, tp, sr, func(ctx context.Context) {
		if _, err := s.InvokeVM(ctx, vm.ID, InvokeRequest{Event: json.RawMessage(`{"op":"raise"}`)}); err != nil {
			t.Fatal(err)
		}
	})
	if got := names(spans); !slices.Equal(got, []string{SpanInvoke}) {
		t.Fatalf("warm: %v, want one invoke span", got)
	}
	// A handler that raised is a completed invocation, not a span error.
	wantAttrs(t, spans[0], "thaw.vm", vm.ID, "thaw.mode", "warm", "thaw.invocation.ok", "false")
	if spans[0].Status().Code != codes.Unset {
		t.Errorf("warm invoke whose handler raised: status %+v", spans[0].Status())
	}
}

// Failures end the step's span as an error: a VMM that does not start,
// a guest that dies during the invocation (then a teardown, the VM
// failed), a damaged snapshot.
func TestColdPathErrorSpans(t *testing.T) {
	s, b, tp, sr := tracedService(t, func(c *Config) { c.KeepAlive = -1 })
	_, sn := bootAndSnapshot(t, s, "echo")
	cold := func(ctx context.Context, ev string) error {
		_, err := s.InvokeCold(ctx, ColdRequest{Function: "echo", InvokeRequest: InvokeRequest{Event: json.RawMessage(ev)}})
		return err
	}

	t.Run("the VMM does not start", func(t *testing.T) {
		b.SetStart(func(vmm.Spec) error { return errors.New("no such device") })
		defer b.SetStart(nil)
		_, spans := request(t, tp, sr, func(ctx context.Context) {
			if err := cold(ctx, `{}`); !errors.Is(err, ErrVMFailed) {
				t.Fatalf("%v", err)
			}
		})
		if got, want := names(spans), []string{SpanAdmission, SpanVerify, SpanStrategy, SpanVMMStart}; !slices.Equal(got, want) {
			t.Fatalf("children: %v, want %v", got, want)
		}
		wantError(t, spans[3], "no such device")
		wantAttrs(t, spans[3], "thaw.snapshot", sn.ID, "thaw.function", "echo")
		for _, sp := range spans[:3] {
			if sp.Status().Code != codes.Unset {
				t.Errorf("span %q: %+v", sp.Name(), sp.Status())
			}
		}
	})
	t.Run("the VMM dies during the invocation", func(t *testing.T) {
		_, spans := request(t, tp, sr, func(ctx context.Context) {
			if err := cold(ctx, `{"op":"crash"}`); !errors.Is(err, ErrVMFailed) {
				t.Fatalf("%v", err)
			}
		})
		want := []string{SpanAdmission, SpanVerify, SpanStrategy, SpanVMMStart, SpanStateLoad, SpanResume, SpanInvoke}
		if got := names(spans); len(got) < len(want) || !slices.Equal(got[:len(want)], want) {
			t.Fatalf("children: %v, want %v, then the teardown", got, want)
		}
		invoke := spans[len(want)-1]
		wantError(t, invoke, "vm process exited")
		// The teardown is the request's, or the supervisor's (which saw
		// the process exit first) in a trace of its own.
		vm := spantest.Attrs(invoke)["thaw.vm"]
		var teardowns []sdktrace.ReadOnlySpan
		for deadline := time.Now().Add(5 * time.Second); len(teardowns) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			for _, sp := range sr.Ended() {
				if sp.Name() == SpanTeardown && spantest.Attrs(sp)["thaw.vm"] == vm {
					teardowns = append(teardowns, sp)
				}
			}
		}
		if len(teardowns) != 1 {
			t.Fatalf("vm %s: %d teardown spans, want 1", vm, len(teardowns))
		}
		teardown := teardowns[0]
		wantAttrs(t, teardown, "thaw.vm.state", "failed")
		if r := spantest.Attrs(teardown)["thaw.reason"]; r == "" {
			t.Error("teardown without a reason")
		}
	})
	t.Run("a damaged snapshot", func(t *testing.T) {
		if err := os.WriteFile(filepath.Join(sn.Dir, snapshot.StateFile), []byte("tampered"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, spans := request(t, tp, sr, func(ctx context.Context) {
			if err := cold(ctx, `{}`); !errors.Is(err, ErrSnapshotUnusable) {
				t.Fatalf("%v", err)
			}
		})
		if got, want := names(spans), []string{SpanAdmission, SpanVerify}; !slices.Equal(got, want) {
			t.Fatalf("children: %v, want %v", got, want)
		}
		wantError(t, spans[1], "snapshot unusable")
	})
}
