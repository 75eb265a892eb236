package atomicfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// WriteFile creates and replaces a file whole, mode 0600, and leaves no
// temporary file beside it.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	for _, want := range []string{"first", "second, longer"} {
		if err := WriteFile(path, []byte(want)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != want {
			t.Fatalf("read back %q, %v; want %q", got, err, want)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, %v; want 0600", fi.Mode(), err)
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 {
		t.Fatalf("directory holds %v (%v), want the file alone", ents, err)
	}
}

// A write that cannot rename (path is a directory) fails, leaves path as
// it was and removes its temporary file.
func TestWriteFileFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "taken")
	if err := os.MkdirAll(filepath.Join(path, "inside"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("x")); err == nil {
		t.Fatal("WriteFile over a non-empty directory succeeded")
	}
	ents, err := os.ReadDir(dir)
	if err != nil || len(ents) != 1 || !ents[0].IsDir() {
		t.Fatalf("directory holds %v (%v), want the directory alone", ents, err)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "f"), nil); err == nil {
		t.Fatal("WriteFile into a missing directory succeeded")
	}
}

// Sync fsyncs a file or a directory, and fails on a missing path.
func TestSync(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, file} {
		if err := Sync(p); err != nil {
			t.Errorf("Sync(%s): %v", p, err)
		}
	}
	if err := Sync(filepath.Join(dir, "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Sync of a missing path: %v, want fs.ErrNotExist", err)
	}
}

// WriteClose writes, syncs and closes; a failed write still closes.
func TestWriteClose(t *testing.T) {
	p := filepath.Join(t.TempDir(), "f")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteClose(f, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(p); err != nil || string(b) != "data" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if err := f.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("file left open: Close = %v", err)
	}
	ro, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteClose(ro, []byte("x")); err == nil {
		t.Error("WriteClose to a read-only file succeeded")
	}
	if err := ro.Close(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("file left open after a failed write: Close = %v", err)
	}
}
