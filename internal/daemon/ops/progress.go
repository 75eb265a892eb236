package ops

import (
	"context"

	"github.com/thaw-dev/thaw/wire"
)

// Progress reporting: long operations say which phase they are in through
// the context; without a reporter (synchronous requests) nothing happens.

type progressKey struct{}

// ProgressFunc receives an operation's progress.
type ProgressFunc func(wire.OperationProgress)

// WithProgress makes the long operations run with ctx report to fn.
func WithProgress(ctx context.Context, fn ProgressFunc) context.Context {
	return context.WithValue(ctx, progressKey{}, fn)
}

// Reporting says whether ctx carries a reporter (work that samples its
// progress need not, without one).
func Reporting(ctx context.Context) bool {
	_, ok := ctx.Value(progressKey{}).(ProgressFunc)
	return ok
}

// Report tells ctx's reporter, if any, where the work is.
func Report(ctx context.Context, p wire.OperationProgress) {
	if fn, ok := ctx.Value(progressKey{}).(ProgressFunc); ok {
		fn(p)
	}
}

// Phase reports a phase without counts.
func Phase(ctx context.Context, name string) { Report(ctx, wire.OperationProgress{Phase: name}) }

// SubProgress is ctx with its reporter's phases prefixed (a boot inside a
// prepare reports "boot: starting vmm"), and counts dropped.
func SubProgress(ctx context.Context, prefix string) context.Context {
	fn, ok := ctx.Value(progressKey{}).(ProgressFunc)
	if !ok {
		return ctx
	}
	return WithProgress(ctx, func(p wire.OperationProgress) { fn(wire.OperationProgress{Phase: prefix + p.Phase}) })
}
