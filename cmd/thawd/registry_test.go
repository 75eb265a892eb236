package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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
