// Package benchtest holds checks the benchmark packages' tests share.
package benchtest

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"
)

// WantAll fails t for every one of wants that text (named what) lacks.
func WantAll(t testing.TB, what, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// WellFormed parses s as XML and counts its elements by name.
func WellFormed(t testing.TB, s string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	dec := xml.NewDecoder(strings.NewReader(s))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, s)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
	if counts["svg"] != 1 {
		t.Fatalf("want one <svg> root, got %d", counts["svg"])
	}
	return counts
}
