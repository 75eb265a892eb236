// Package progress carries a long piece of work's progress in its context:
// the work reports its phases (and counts) with Report or Phase, which do
// nothing without a reporter, so the same code serves synchronous
// requests and asynchronous operations. It imports nothing of thaw's but
// the wire types, so every component of the daemon can report.
package progress

import (
	"context"

	"github.com/thaw-dev/thaw/wire"
)

type key struct{}

// Func receives a piece of work's progress.
type Func func(wire.OperationProgress)

// With makes the work run with ctx report to fn.
func With(ctx context.Context, fn Func) context.Context {
	return context.WithValue(ctx, key{}, fn)
}

// Reporting says whether ctx carries a reporter (work that samples its
// progress need not, without one).
func Reporting(ctx context.Context) bool {
	_, ok := ctx.Value(key{}).(Func)
	return ok
}

// Report tells ctx's reporter, if any, where the work is.
func Report(ctx context.Context, p wire.OperationProgress) {
	if fn, ok := ctx.Value(key{}).(Func); ok {
		fn(p)
	}
}

// Phase reports a phase without counts.
func Phase(ctx context.Context, name string) { Report(ctx, wire.OperationProgress{Phase: name}) }

// Sub is ctx with its reporter's phases prefixed (a boot inside a prepare
// reports "boot: starting vmm"), and counts dropped.
func Sub(ctx context.Context, prefix string) context.Context {
	fn, ok := ctx.Value(key{}).(Func)
	if !ok {
		return ctx
	}
	return With(ctx, func(p wire.OperationProgress) { fn(wire.OperationProgress{Phase: prefix + p.Phase}) })
}
