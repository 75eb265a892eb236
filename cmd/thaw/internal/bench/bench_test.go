package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteResultsMakesTheDirectory: the results go into DIR, made if it
// is missing, one sample a line in DIR/NAME.jsonl.
func TestWriteResultsMakesTheDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "runs", "first")
	samples := []map[string]int{{"ms": 1}, {"ms": 2}}
	if err := writeResults(dir, "restore", samples, map[string]int{"n": 2}, "table\n"); err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"restore.jsonl": "{\"ms\":1}\n{\"ms\":2}\n",
		"restore.json":  "{\n  \"n\": 2\n}",
	} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", file, b, err, want)
		}
	}
	md, err := os.ReadFile(filepath.Join(dir, "restore.md"))
	if err != nil || !strings.HasPrefix(string(md), "# restore\n") || !strings.HasSuffix(string(md), "table\n") {
		t.Errorf("restore.md: %q, %v", md, err)
	}
	f, err := createInDir(filepath.Join(dir, "more"), "eval.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := os.Stat(filepath.Join(dir, "more", "eval.jsonl")); err != nil {
		t.Error(err)
	}
}
