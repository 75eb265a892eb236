// Package spantest reads spans recorded in memory (an SDK tracer provider
// with a tracetest.SpanRecorder) for tests.
package spantest

import (
	"slices"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Attrs are a span's attributes, each value as Value.Emit writes it.
func Attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]string {
	m := map[attribute.Key]string{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value.Emit()
	}
	return m
}

// RecordedException reports whether s has an exception event.
func RecordedException(s sdktrace.ReadOnlySpan) bool {
	for _, ev := range s.Events() {
		if ev.Name == "exception" {
			return true
		}
	}
	return false
}

// Children are the spans among spans whose parent is parent, in the order
// they started (spans that started at once in the order given).
func Children(spans []sdktrace.ReadOnlySpan, parent trace.SpanID) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Parent().SpanID() == parent {
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b sdktrace.ReadOnlySpan) int { return a.StartTime().Compare(b.StartTime()) })
	return out
}
