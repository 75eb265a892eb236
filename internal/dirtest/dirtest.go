// Package dirtest reads directories for tests: what a step left behind
// and what a directory holds. Only tests import it.
package dirtest

import (
	"os"
	"testing"
)

// Names are the names of dir's entries, sorted (nil if it is empty); the
// test fails if dir cannot be read.
func Names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
