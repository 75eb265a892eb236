package functions

import (
	"context"
	"testing"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/dirtest"
	"github.com/thaw-dev/thaw/internal/registry"
	"github.com/thaw-dev/thaw/internal/vmnet"
)

// A function created from a registry record has the record's settings and
// code; one built from a record (a version's) is not entered, the
// function's own row stays, and no staging directory is left.
func TestFromRecord(t *testing.T) {
	m, _ := newManager(t, nil)
	ctx := context.Background()
	code := archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return e\n"})
	rec := &registry.FunctionRecord{MemoryMiB: 384, VCPUs: 2, Egress: string(vmnet.EgressNone), MaxConcurrency: 3,
		KeepAliveS: -1, VMMPool: 2, VMMPoolTTLS: 30, Env: map[string]string{"MODE": "v1"}}
	fn, err := m.CreateFromRecord(ctx, "app", rec, code)
	if err != nil {
		t.Fatal(err)
	}
	if fn.MemoryMiB != 384 || fn.VCPUs != 2 || fn.MaxConcurrency != 3 || fn.KeepAliveS != -1 || fn.VMMPool != 2 ||
		fn.VMMPoolTTLS != 30 || fn.Env["MODE"] != "v1" {
		t.Fatalf("created %+v, want the record's settings", fn)
	}
	v2 := *rec
	v2.MemoryMiB, v2.Env = 512, map[string]string{"MODE": "v2"}
	built, err := m.BuildFromRecord(ctx, "app", &v2, code)
	if err != nil {
		t.Fatal(err)
	}
	if built.MemoryMiB != 512 || built.Env["MODE"] != "v2" || built.Digest == fn.Digest || built.CodeDir == fn.CodeDir {
		t.Fatalf("built %+v beside %+v", built, fn)
	}
	got, err := m.GetFunction(ctx, "app")
	if err != nil || got.MemoryMiB != 384 || got.Digest != fn.Digest {
		t.Fatalf("the function's row after a build: %+v, %v", got, err)
	}
	if left := dirtest.Names(t, m.FunctionsDir()); len(left) != 2 {
		t.Errorf("functions dir holds %v, want the function's and the build's code", left)
	}
}
