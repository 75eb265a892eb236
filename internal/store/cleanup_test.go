package store

import (
	"os"
	"path/filepath"
	"testing"
)

func missing(p string) bool {
	_, err := os.Lstat(p)
	return os.IsNotExist(err)
}

// A store directory Open made goes when it holds nothing, and stays while
// it holds a copy (the next daemon on the data directory uses it). A
// directory that was there when the store was opened is the operator's
// (--store-dir) and stays.
func TestRemoveIfEmptyCreated(t *testing.T) {
	base, err := os.MkdirTemp("/dev/shm", "thaw-store-test-")
	if err != nil {
		t.Skip("no /dev/shm:", err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	dir := filepath.Join(base, "store")
	s := openKind(t, dir, TmpFS, 0)
	src, fi := memFile(t, 16, []uint64{1})
	if _, err := s.Put("snap-kept", src, fi); err != nil {
		t.Fatal(err)
	}
	if gone, err := s.RemoveIfEmpty(); err != nil || gone {
		t.Fatalf("with a copy: gone %v err %v", gone, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "snap-kept.mem")); err != nil {
		t.Fatalf("the copy went: %v", err)
	}
	if err := s.Remove("snap-kept"); err != nil {
		t.Fatal(err)
	}
	if gone, err := s.RemoveIfEmpty(); err != nil || !gone || !missing(dir) {
		t.Fatalf("empty: gone %v err %v", gone, err)
	}
	own := filepath.Join(base, "operators")
	if err := os.Mkdir(own, 0o700); err != nil {
		t.Fatal(err)
	}
	s2 := openKind(t, own, TmpFS, 0)
	if gone, err := s2.RemoveIfEmpty(); err != nil || gone || missing(own) {
		t.Fatalf("the operator's directory: gone %v err %v", gone, err)
	}
}

// A default store (per data directory, under DefaultDir) goes when empty
// whoever made it; RemoveUnusedDefault takes one a configuration no
// longer uses.
func TestRemoveIfEmptyDefault(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("DefaultDir is root's")
	}
	dir := DefaultDirFor(t.TempDir())
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	s := openKind(t, dir, TmpFS, 0)
	if gone, err := s.RemoveIfEmpty(); err != nil || !gone || !missing(dir) {
		t.Fatalf("default store: gone %v err %v", gone, err)
	}
	data := t.TempDir()
	other := DefaultDirFor(data)
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(other) })
	if err := os.WriteFile(filepath.Join(other, "snap-x.mem"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := RemoveUnusedDefault(data); err != nil || missing(other) {
		t.Fatalf("an unused default store with a file: %v, gone %v", err, missing(other))
	}
	os.Remove(filepath.Join(other, "snap-x.mem"))
	if err := RemoveUnusedDefault(data); err != nil || !missing(other) {
		t.Fatalf("an unused empty default store: %v, gone %v", err, missing(other))
	}
	if err := RemoveUnusedDefault(data); err != nil {
		t.Fatalf("again: %v", err)
	}
}

// A device store has no directory to remove.
func TestRemoveIfEmptyDevice(t *testing.T) {
	s := &Store{kind: DevDAX, dir: "/dev/dax0.0"}
	if gone, err := s.RemoveIfEmpty(); err != nil || gone {
		t.Fatalf("gone %v err %v", gone, err)
	}
}
