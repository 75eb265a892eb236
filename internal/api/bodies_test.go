package api

import (
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// A function's body shows its dependencies as resolved; one without has
// none.
func TestFunctionBodyDeps(t *testing.T) {
	fn := &catalog.Function{Name: "tables", MemoryMiB: 256, Deps: &catalog.Deps{Requested: []string{"texttable>=1.6"},
		Resolved: []string{"texttable==1.7.2 --hash=sha256:ab"}, Layer: "3273c7f66754", LayerSHA256: "cd", LayerBytes: 4096, Format: "erofs"}}
	b := FunctionBody(fn)
	if b.Name != "tables" || b.MemoryMiB != 256 || b.Deps == nil || b.Deps.Layer != "3273c7f66754" || b.Deps.Resolved[0] != fn.Deps.Resolved[0] ||
		b.Deps.LayerSHA256 != "cd" || b.Deps.LayerBytes != 4096 || b.Deps.Format != "erofs" || b.Deps.Requested[0] != "texttable>=1.6" {
		t.Fatalf("body %+v deps %+v", b, b.Deps)
	}
	if b := FunctionBody(&catalog.Function{Name: "plain"}); b.Deps != nil {
		t.Fatalf("a function without requirements has deps %+v", b.Deps)
	}
}
