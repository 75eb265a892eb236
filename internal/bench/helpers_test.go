package bench

import (
	"strings"
	"testing"
)

// wantAll fails t for every one of wants that text (named what) lacks.
func wantAll(t *testing.T, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}
