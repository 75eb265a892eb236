package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
	fsstore "github.com/thaw-dev/thaw/internal/objstore/fs"
	"github.com/thaw-dev/thaw/internal/objstore/objstoretest"
)

func open(t *testing.T, root string) *fsstore.Store {
	t.Helper()
	s, err := fsstore.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return open(t, filepath.Join(t.TempDir(), "registry"))
	})
}

// TestOwnNames: keys with a segment starting with "." are the store's
// own (temporaries, locks) and refused; listings never show them.
func TestOwnNames(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	s := open(t, root)
	ctx := context.Background()
	for _, k := range []string{".tmp-x", "a/.lock-b", "a/.hidden/c"} {
		if err := s.Put(ctx, k, []byte("x"), objstore.PutOptions{}); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("put %q: %v, want ErrInvalidKey", k, err)
		}
	}
	if err := s.Put(ctx, "a/b", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "a", ".tmp-dead"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}
	for o, err := range s.List(ctx, "") {
		if err != nil || o.Key != "a/b" {
			t.Fatalf("listed %+v, %v; want only a/b", o, err)
		}
	}
}

// TestModes: objects are 0600 and directories 0700 whatever the umask.
func TestModes(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	s := open(t, root)
	if err := s.Put(context.Background(), "d/e/obj", []byte("x"), objstore.PutOptions{IfAbsent: true}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{root: fsstore.DirMode, filepath.Join(root, "d", "e"): fsstore.DirMode,
		filepath.Join(root, "d", "e", "obj"): fsstore.FileMode} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%v), want %v", p, st.Mode().Perm(), err, want)
		}
	}
}

// TestPing: a missing root or a file in its place is ErrNotFound; a
// relative root is refused.
func TestPing(t *testing.T) {
	dir := t.TempDir()
	s, err := fsstore.Open(filepath.Join(dir, "missing"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Ping(context.Background()); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ping of a missing directory: %v, want ErrNotFound", err)
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	s, _ = fsstore.Open(file)
	if err := s.Ping(context.Background()); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ping of a file: %v, want ErrNotFound", err)
	}
	for _, bad := range []string{"relative/dir", "/a/../b", ""} {
		if _, err := fsstore.Open(bad); err == nil {
			t.Errorf("Open(%q) accepted", bad)
		}
	}
}
