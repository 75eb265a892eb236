package bench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/client"
)

// TestFailedSampleLineEscaped: a failed cold start's progress line quotes
// the function's error escaped and on one line; the sample keeps it as it
// was.
func TestFailedSampleLineEscaped(t *testing.T) {
	var out strings.Builder
	r := &restoreRun{res: &RestoreResult{}, say: func(f string, a ...any) { fmt.Fprintf(&out, f+"\n", a...) }}
	inv := &client.Invocation{Error: &client.FunctionError{Type: "ValueError", Message: "\x1b[2J\u009b\n[bench restore] all good"}}
	s := restoreSampleOf(inv, nil, 0)
	r.add(s)
	want := `FAILED: function raised ValueError: \x1b[2J\u009b\n[bench restore] all good` + "\n"
	if got := out.String(); strings.Count(got, "\n") != 1 || !strings.HasSuffix(got, want) {
		t.Errorf("progress %q, want one line ending in %q", got, want)
	}
	if r.res.Samples[0].Error != "function raised ValueError: "+inv.Error.Message {
		t.Errorf("sample error %q", r.res.Samples[0].Error)
	}
}
