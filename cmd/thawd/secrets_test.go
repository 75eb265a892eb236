package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/secrets"
)

// TestSecretsRotateKey: thawd secrets rotate-key seals the store under a
// new key, and refuses while a daemon holds the data directory.
func TestSecretsRotateKey(t *testing.T) {
	base := validBase(t)
	dataDir := base[1]
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		t.Fatal(err)
	}
	st, err := secrets.Open(dataDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := st.Set("db", []byte("a value that stays"), time.Now()); err != nil {
		t.Fatal(err)
	}
	old, _ := os.ReadFile(filepath.Join(dataDir, secrets.KeyFileName))
	r := runThawd(t, nil, append(base, "secrets", "rotate-key")...)
	if r.code != 0 || !strings.Contains(r.stdout, "sealed the secret store") || r.served != nil {
		t.Fatalf("rotate-key: exit %d %q", r.code, r.stderr)
	}
	now, _ := os.ReadFile(filepath.Join(dataDir, secrets.KeyFileName))
	st, err = secrets.Open(dataDir)
	if err != nil || string(now) == string(old) {
		t.Fatalf("after rotation: %v (key changed: %v)", err, string(now) != string(old))
	}
	if v, err := st.Values([]string{"db"}); err != nil || string(v[0].Value) != "a value that stays" {
		t.Fatalf("values %v %v", v, err)
	}
	// A daemon holding the directory: refused, nothing changed.
	lock, err := os.OpenFile(filepath.Join(dataDir, daemon.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	if r := runThawd(t, nil, append(base, "secrets", "rotate-key")...); r.code != exitFailed || !strings.Contains(r.stderr, "used by another thawd") {
		t.Fatalf("rotate-key with a daemon running: exit %d %q", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(filepath.Join(dataDir, secrets.KeyFileName)); string(after) != string(now) {
		t.Error("the refused rotation changed the key")
	}
}
