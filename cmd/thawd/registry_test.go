package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/signing"
)

// TestRegistrySettings: the registry comes from its config file, or from
// the environment alone; a bad file is one more problem listed at start;
// the budget is in MiB; the secrets never reach the output.
func TestRegistrySettings(t *testing.T) {
	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte("endpoint: 127.0.0.1:9000\nbucket: snaps\nsecret_key: topsecretvalue\naccess_key: akid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runThawd(t, nil, append(validBase(t), "--registry-config", reg, "--chunk-cache-budget", "100", "--registry-push-on-prepare",
		"--registry-gc-every", "6h", "--registry-gc-grace", "2h", "--registry-refresh", "30s")...)
	if r.code != 0 || r.served == nil {
		t.Fatalf("exit %d", r.code)
	}
	d := r.served.Daemon
	if d.Registry == nil || d.Registry.Endpoint != "127.0.0.1:9000" || d.Registry.SecretKey != "topsecretvalue" ||
		d.ChunkCacheBudget != 100<<20 || !d.RegistryPushOnPrepare || d.RegistryGCInterval != 6*time.Hour || d.RegistryGCGrace != 2*time.Hour ||
		d.RegistryRefresh != 30*time.Second {
		t.Fatalf("daemon config: registry %v budget %d push %v", d.Registry, d.ChunkCacheBudget, d.RegistryPushOnPrepare)
	}

	env := map[string]string{"THAW_REGISTRY_ENDPOINT": "127.0.0.1:9001", "THAW_REGISTRY_BUCKET": "b",
		"AWS_ACCESS_KEY_ID": "akid", "AWS_SECRET_ACCESS_KEY": "envsecretvalue"}
	r = runThawd(t, env, append(validBase(t), "config", "check")...)
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "envsecretvalue") {
		t.Fatalf("config check from the environment: exit %d, or the secret is shown", r.code)
	}

	r = runThawd(t, nil, append(validBase(t), "--registry-config", filepath.Join(t.TempDir(), "absent.yaml"), "--registry-push-on-prepare", "--memory", "1")...)
	for _, want := range []string{"--registry-config", "absent.yaml", "default memory 1 MiB"} {
		if r.code == 0 || !strings.Contains(r.stderr, want) {
			t.Errorf("bad registry config: exit %d, stderr lacks %q", r.code, want)
		}
	}
}

// TestRegistryKeyAndTrustedKeys: 'thawd registry key' creates the node's
// key once (0600) and prints its line, with the node name; the trusted
// keys come from flags, the environment (a list) and the config file, as
// files or key lines; a bad one is a problem listed at start, with its
// file and line.
func TestRegistryKeyAndTrustedKeys(t *testing.T) {
	base := validBase(t)
	data := base[1]
	r := runThawd(t, nil, append(base, "--node-name", "node-7", "registry", "key")...)
	line := strings.TrimSpace(r.stdout)
	k, err := signing.ParsePublicKey(line)
	if r.code != 0 || err != nil || k.Comment != "node-7" || !strings.Contains(r.stderr, "created") {
		t.Fatalf("registry key: exit %d, %q: %v", r.code, line, err)
	}
	if fi, err := os.Stat(filepath.Join(data, signing.KeyFileName)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if again := runThawd(t, nil, append(base, "--node-name", "node-7", "registry", "key")...); again.code != 0 || strings.TrimSpace(again.stdout) != line || again.stderr != "" {
		t.Fatalf("second run: exit %d, %q", again.code, again.stdout)
	}

	reg := filepath.Join(t.TempDir(), "registry.yaml")
	if err := os.WriteFile(reg, []byte("endpoint: 127.0.0.1:9000\nbucket: snaps\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	other, _ := signing.GenerateKey(nil)
	keysFile := filepath.Join(t.TempDir(), "trusted")
	if err := os.WriteFile(keysFile, []byte("# nodes\n"+line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inline := other.Public().String()
	r = runThawd(t, nil, append(validBase(t), "--registry-config", reg, "--registry-trusted-keys", keysFile, "--registry-trusted-keys", inline)...)
	if r.code != 0 || !slices.Equal(r.served.Daemon.RegistryTrustedKeys, []string{keysFile, inline}) {
		t.Fatalf("flags: exit %d, %v", r.code, r.served)
	}
	r = runThawd(t, map[string]string{"THAWD_REGISTRY_TRUSTED_KEYS": keysFile + "," + inline}, append(validBase(t), "--registry-config", reg)...)
	if r.code != 0 || !slices.Equal(r.served.Daemon.RegistryTrustedKeys, []string{keysFile, inline}) {
		t.Fatalf("environment: exit %d, %v", r.code, r.served)
	}
	conf := writeConfig(t, "registry-trusted-keys:\n  - "+keysFile+"\n  - "+inline+"\n")
	r = runThawd(t, nil, append(validBase(t), "--registry-config", reg, "--config", conf)...)
	if r.code != 0 || !slices.Equal(r.served.Daemon.RegistryTrustedKeys, []string{keysFile, inline}) {
		t.Fatalf("config file: exit %d, %v", r.code, r.served)
	}

	bad := filepath.Join(t.TempDir(), "bad")
	if err := os.WriteFile(bad, []byte(line+"\nthaw-ed25519 AAAA\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = runThawd(t, nil, append(validBase(t), "--registry-config", reg, "--registry-trusted-keys", bad, "--memory", "1", "config", "check")...)
	for _, want := range []string{bad + ":2:", "default memory 1 MiB"} {
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("bad trusted keys: exit %d, stderr lacks %q", r.code, want)
		}
	}
	r = runThawd(t, nil, append(validBase(t), "--registry-trusted-keys", keysFile)...)
	if r.code != 1 || !strings.Contains(r.stderr, "need a registry config") {
		t.Errorf("trusted keys without a registry: exit %d", r.code)
	}
}
