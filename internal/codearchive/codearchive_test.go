package codearchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// untar lists a TarGz archive as name -> content ("" for directories).
func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	out := map[string]string{}
	for h, err := tr.Next(); !errors.Is(err, io.EOF); h, err = tr.Next() {
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = string(body)
	}
	return out
}

func write(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Pack packs files and directories by their paths in dir, leaves out
// __pycache__ and .git, packs a directory named through a symlink, and
// refuses what is neither a file nor a directory.
func TestPack(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "handler.py"), "def handle(e): return e\n")
	write(t, filepath.Join(dir, "lib", "util.py"), "X = 1\n")
	write(t, filepath.Join(dir, "__pycache__", "handler.pyc"), "bytecode")
	write(t, filepath.Join(dir, ".git", "HEAD"), "ref")
	want := map[string]string{"handler.py": "def handle(e): return e\n", "lib/": "", "lib/util.py": "X = 1\n"}
	link := filepath.Join(t.TempDir(), "fn")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{dir, link} {
		b, err := Pack(d)
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		got := untar(t, b)
		names := func(m map[string]string) []string {
			var out []string
			for k := range m {
				out = append(out, k)
			}
			slices.Sort(out)
			return out
		}
		if !slices.Equal(names(got), names(want)) {
			t.Fatalf("%s: packed %v, want %v", d, names(got), names(want))
		}
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s: %s holds %q, want %q", d, k, got[k], v)
			}
		}
	}
	// The same code packs to the same bytes, whatever its files' times.
	first, err := Pack(dir)
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "handler.py"), later, later); err != nil {
		t.Fatal(err)
	}
	if again, err := Pack(dir); err != nil || !bytes.Equal(first, again) {
		t.Fatalf("packing the same code again gave other bytes (%v)", err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(dir); err == nil || !strings.Contains(err.Error(), "pipe is not a regular file or directory") {
		t.Fatalf("Pack with a fifo: %v", err)
	}
	if _, err := Pack(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("Pack of a missing directory succeeded")
	}
}
