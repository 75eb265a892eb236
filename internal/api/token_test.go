package api

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestTokenGeneratedOnceAndReused: the first start writes 32 random bytes
// in hex, mode 0600 even under umask 000; a restart reads the same token.
func TestTokenGeneratedOnceAndReused(t *testing.T) {
	dir := t.TempDir()
	old := syscall.Umask(0)
	tok, created, err := LoadOrCreateToken(dir)
	syscall.Umask(old)
	if err != nil || !created {
		t.Fatalf("first start: created %v, %v", created, err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(tok) {
		t.Errorf("token %q is not 32 bytes in hex", tok)
	}
	path := filepath.Join(dir, TokenFileName)
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v, want a regular file 0600", fi.Mode(), err)
	}
	again, created, err := LoadOrCreateToken(dir)
	if err != nil || created || again != tok {
		t.Errorf("restart: %q created %v %v, want the same token, not created", again, created, err)
	}
	other, _, err := LoadOrCreateToken(t.TempDir())
	if err != nil || other == tok {
		t.Errorf("another data directory got %q (%v): tokens must be random", other, err)
	}
}

func TestTokenFileRefused(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("ab", 20)
	write := func(name, content string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := write("ok", good+"\n", 0o600)
	if tok, err := ReadTokenFile(ok); err != nil || tok != good {
		t.Fatalf("good token file: %q %v", tok, err)
	}
	if tok, err := ReadTokenFile(write("ro", good, 0o400)); err != nil || tok != good {
		t.Errorf("read-only token file: %q %v", tok, err)
	}
	link := filepath.Join(dir, "link")
	os.Symlink(ok, link)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, contains string
	}{
		{"group-readable", write("g", good, 0o640), "accessible to group or others"},
		{"other-readable", write("o", good, 0o604), "accessible to group or others"},
		{"group-writable", write("gw", good, 0o620), "accessible to group or others"},
		{"symbolic link", link, "symbolic link"},
		{"directory", t.TempDir(), "not a regular file"},
		{"fifo", fifo, "not a regular file"},
		{"missing", filepath.Join(dir, "missing"), "no such file"},
		{"empty", write("empty", "\n", 0o600), "at least 32"},
		{"short", write("short", "secret", 0o600), "at least 32"},
		{"two words", write("two", good+" "+good, 0o600), "at least 32"},
		{"not header-safe", write("bad", good+"\"", 0o600), "at least 32"},
	} {
		if tok, err := ReadTokenFile(c.path); err == nil || !strings.Contains(err.Error(), c.contains) {
			t.Errorf("%s: %q %v, want an error mentioning %q", c.name, tok, err, c.contains)
		}
	}
	if os.Geteuid() == 0 {
		foreign := write("foreign", good, 0o600)
		if err := os.Chown(foreign, nobody, nobody); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadTokenFile(foreign); err == nil || !strings.Contains(err.Error(), "owned by uid 65534") {
			t.Errorf("token file of another user: %v", err)
		}
	}

	// A generated token whose file was loosened later is refused, not used.
	data := t.TempDir()
	if _, _, err := LoadOrCreateToken(data); err != nil {
		t.Fatal(err)
	}
	os.Chmod(filepath.Join(data, TokenFileName), 0o644)
	if _, _, err := LoadOrCreateToken(data); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("loosened token file: %v", err)
	}
}
