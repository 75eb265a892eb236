// Package problemtest checks the errors of thaw's Validate methods, which
// report every problem they find at once, one per line (errors.Join). Only
// tests import it.
package problemtest

import (
	"strings"
	"testing"
)

// Check fails t unless err, what Validate returned, is nil where want is
// empty, and otherwise reports exactly len(want) problems and mentions
// every string of want.
func Check(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Validate = %v, want nil", err)
		}
		return
	}
	if err == nil {
		t.Fatalf("Validate = nil, want %d problems", len(want))
	}
	if n := len(strings.Split(err.Error(), "\n")); n != len(want) {
		t.Errorf("Validate reported %d problems, want %d:\n%v", n, len(want), err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Validate error does not mention %q:\n%v", w, err)
		}
	}
}
