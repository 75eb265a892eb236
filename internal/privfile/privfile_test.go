package privfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Read gives a private file's bytes (up to the limit) and refuses, with
// ErrUnsafe and a message naming the problem, every file that is not
// private; a missing file is fs.ErrNotExist.
func TestRead(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("0123456789"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", 0o600)
	if b, err := Read(good, 4); err != nil || string(b) != "0123" {
		t.Fatalf("Read(good, 4) = %q, %v", b, err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, path, want string }{
		{"symbolic link", link, "symbolic link"},
		{"directory", t.TempDir(), "not a regular file"},
		{"fifo", fifo, "not a regular file"},
		{"group-readable", write("g", 0o640), "accessible to group or others (mode 0640): chmod 600 it"},
		{"other-writable", write("o", 0o602), "accessible to group or others"},
	} {
		_, err := Read(tc.path, 100)
		if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want ErrUnsafe naming the file and %q", tc.name, err, tc.want)
		}
	}
	if os.Geteuid() == 0 { // only root can give a file away
		foreign := write("foreign", 0o600)
		if err := os.Chown(foreign, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(foreign, 100); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("file of another user: %v", err)
		}
	}
	if _, err := Read(filepath.Join(dir, "missing"), 100); !errors.Is(err, fs.ErrNotExist) || errors.Is(err, ErrUnsafe) {
		t.Errorf("missing file: %v, want fs.ErrNotExist", err)
	}
}

// Create makes a 0600 file once, refuses an existing name (a link
// included, whose target stays absent), and leaves nothing when it fails.
func TestCreate(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := Create(p, []byte("secret\n")); err != nil {
		t.Fatal(err)
	}
	if b, err := Read(p, 100); err != nil || string(b) != "secret\n" {
		t.Fatalf("read back %q, %v", b, err)
	}
	if err := Create(p, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Errorf("second Create: %v, want fs.ErrExist", err)
	}
	target, link := filepath.Join(dir, "target"), filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := Create(link, []byte("x")); err == nil {
		t.Error("Create through a symbolic link succeeded")
	}
	if _, err := os.Lstat(target); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the link's target: %v, want none", err)
	}
	if err := Create(filepath.Join(dir, "missing", "key"), nil); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Create in a missing directory: %v", err)
	}
}
