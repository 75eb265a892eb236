package progress

import (
	"context"
	"slices"
	"testing"

	"github.com/thaw-dev/thaw/wire"
)

// Progress goes to ctx's reporter, prefixed (counts dropped) inside a
// sub-step; without a reporter nothing happens.
func TestProgress(t *testing.T) {
	var seen []wire.OperationProgress
	plain := context.Background()
	if Reporting(plain) {
		t.Fatal("a bare context reports")
	}
	Report(plain, wire.OperationProgress{Phase: "nobody hears"})
	if Sub(plain, "boot: ") != plain {
		t.Error("a sub-step without a reporter made a new context")
	}
	ctx := With(plain, func(p wire.OperationProgress) { seen = append(seen, p) })
	if !Reporting(ctx) {
		t.Fatal("a context with a reporter does not report")
	}
	Phase(ctx, "clean snapshot")
	Report(ctx, wire.OperationProgress{Phase: "copying", Done: 3, Total: 9, Unit: "bytes"})
	Report(Sub(ctx, "boot: "), wire.OperationProgress{Phase: "booting", Done: 1, Total: 4, Unit: "steps"})
	want := []wire.OperationProgress{{Phase: "clean snapshot"}, {Phase: "copying", Done: 3, Total: 9, Unit: "bytes"}, {Phase: "boot: booting"}}
	if !slices.Equal(seen, want) {
		t.Errorf("progress %+v, want %+v", seen, want)
	}
}
