package dirtest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Names lists files and directories alike, sorted, and nothing for an
// empty directory.
func TestNames(t *testing.T) {
	dir := t.TempDir()
	if got := Names(t, dir); got != nil {
		t.Fatalf("empty directory: %q", got)
	}
	for _, f := range []string{"b", "a"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "c"), 0o700); err != nil {
		t.Fatal(err)
	}
	if got := Names(t, dir); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("Names = %q, want a, b, c", got)
	}
}
