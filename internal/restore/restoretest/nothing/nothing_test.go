package nothing_test

import (
	"testing"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/restore/restoretest"
	"github.com/thaw-dev/thaw/internal/restore/restoretest/nothing"
)

// The strategy passes the conformance suite, and once registered it is a
// strategy like the built-in ones: found by kind, listed last, described.
func TestNothing(t *testing.T) {
	if err := nothing.Register(); err != nil {
		t.Fatal(err)
	}
	restoretest.Suite(t, nothing.Strategy, restoretest.Options{Pages: []int{257, 1000}})
	if k, err := restore.ParseKind("nothing"); err != nil || k != nothing.Kind {
		t.Fatalf("ParseKind: %v %v", k, err)
	}
	if ks := restore.Kinds(); ks[len(ks)-1] != nothing.Kind {
		t.Fatalf("kinds %v", ks)
	}
	d := nothing.Strategy.Describe()
	if len(d.Stats) != 1 || d.Stats[0].Name != "mapped_bytes" || d.Stats[0].Unit != "bytes" {
		t.Fatalf("describes %+v", d)
	}
	if err := restore.Register(nothing.Strategy); err == nil {
		t.Fatal("registered twice")
	}
}
