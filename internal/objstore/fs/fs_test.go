package fs_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

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

// TestSymlinksRefused: a link planted in the store (a directory or an
// object pointing outside it) is never followed: no read, write or delete
// reaches outside the root, and listings skip it.
func TestSymlinksRefused(t *testing.T) {
	root := filepath.Join(t.TempDir(), "r")
	s := open(t, root)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("outside"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "evil")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, k := range []string{"evil/secret", "link"} {
		if b, _, err := s.Get(ctx, k, objstore.GetOptions{}); err == nil {
			t.Errorf("get %s through a link read %q", k, b)
		}
		if _, err := s.Stat(ctx, k); err == nil {
			t.Errorf("stat %s through a link succeeded", k)
		}
	}
	if err := s.Put(ctx, "evil/new", []byte("x"), objstore.PutOptions{}); err == nil {
		t.Error("put through a linked directory succeeded")
	}
	if err := s.Delete(ctx, "evil/secret"); err != nil {
		t.Logf("delete through a link: %v", err)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "outside" {
		t.Fatalf("the file outside the root was changed: %q, %v", b, err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("%d files outside the root, want the one there before", len(ents))
	}
	for o, err := range s.List(ctx, "") {
		t.Fatalf("listed %+v, %v: links are no objects", o, err)
	}
}

// TestStaleLockBroken: a conditional put's lock left by a dead holder is
// broken after LockStale; a live one makes the put wait.
func TestStaleLockBroken(t *testing.T) {
	old := fsstore.LockStale
	fsstore.LockStale = 300 * time.Millisecond
	t.Cleanup(func() { fsstore.LockStale = old })
	root := filepath.Join(t.TempDir(), "r")
	s := open(t, root)
	ctx := context.Background()
	if err := s.Put(ctx, "d/k", []byte("one"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(ctx, "d/k")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "d", ".lock-k"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s.Put(short, "d/k", []byte("two"), objstore.PutOptions{IfMatch: info.ETag}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put beside a live lock: %v, want it to wait until its deadline", err)
	}
	t0 := time.Now()
	if err := s.Put(ctx, "d/k", []byte("two"), objstore.PutOptions{IfMatch: info.ETag}); err != nil {
		t.Fatalf("put after the lock went stale: %v", err)
	}
	if waited := time.Since(t0); waited < 100*time.Millisecond {
		t.Fatalf("put took the lock after %s, before it was stale", waited)
	}
	if _, err := os.Stat(filepath.Join(root, "d", ".lock-k")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("lock file left: %v", err)
	}
}

// TestFullDisk: a put on a full filesystem fails with ENOSPC (what the
// daemon reports as no space), leaves no temporary file and the object
// before it whole.
func TestFullDisk(t *testing.T) {
	root := smallTmpfs(t, 256<<10)
	s := open(t, root)
	ctx := context.Background()
	if err := s.Put(ctx, "a/k", []byte("before"), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 1<<20)
	for _, opts := range []objstore.PutOptions{{}, {IfAbsent: true}} {
		err := s.Put(ctx, "a/big", big, opts)
		if !errors.Is(err, syscall.ENOSPC) {
			t.Fatalf("put of 1 MiB on 256 KiB: %v, want ENOSPC", err)
		}
		if !strings.Contains(err.Error(), "no space left in "+root) {
			t.Errorf("error %q does not say where space ran out", err)
		}
	}
	ents, err := os.ReadDir(filepath.Join(root, "a"))
	if err != nil || len(ents) != 1 || ents[0].Name() != "k" {
		t.Fatalf("directory after failed puts: %v, %v; want only k", ents, err)
	}
	if b, _, err := s.Get(ctx, "a/k", objstore.GetOptions{}); err != nil || string(b) != "before" {
		t.Fatalf("object before the failed puts: %q, %v", b, err)
	}
}

// smallTmpfs mounts a tmpfs of size bytes for t (skipped where mounting
// is not allowed).
func smallTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs to fill (%v): needs CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return dir
}

// BenchmarkChunk: puts and gets of 512 KiB objects (the default chunk).
func BenchmarkChunk(b *testing.B) {
	s, err := fsstore.Open(filepath.Join(b.TempDir(), "registry"))
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Init(context.Background()); err != nil {
		b.Fatal(err)
	}
	objstoretest.Bench(b, s, 512<<10)
}
