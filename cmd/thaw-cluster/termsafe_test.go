package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestErrorEscaped: an error quoting text thaw-cluster does not control
// (here a directory name; in a benchmark, a guest's error) reaches stderr
// with its control characters escaped and its further lines marked.
func TestErrorEscaped(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "x\x1b[2J\u009b\nthaw-cluster: all good")
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"kill", "--dir", dir, "node-1"}, &bytes.Buffer{}, &stderr); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	out := stderr.String()
	if strings.ContainsAny(out, "\x1b\u009b") || !strings.Contains(out, `x\x1b[2J\u009b`) {
		t.Errorf("stderr %q: control characters not escaped", out)
	}
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n")[1:] {
		if !strings.HasPrefix(line, "  | ") {
			t.Errorf("stderr %q: line %q is not marked", out, line)
		}
	}
}
