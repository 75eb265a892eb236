package registry_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/registry"
)

func TestConfigNeverShowsSecrets(t *testing.T) {
	c := registry.Config{Endpoint: "127.0.0.1:9000", Bucket: "b", AccessKey: "AKIDSECRETVALUE", SecretKey: "sEcReTkEy/with+chars"}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("registry", "config", c)
	slog.New(slog.NewTextHandler(&logged, nil)).Info("registry", "config", c)
	js, _ := json.Marshal(c)
	for _, out := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c), logged.String(), string(js)} {
		if strings.Contains(out, c.AccessKey) || strings.Contains(out, c.SecretKey) {
			t.Fatalf("secret in output: %s", out)
		}
		if !strings.Contains(out, "127.0.0.1:9000") || !strings.Contains(out, "[redacted]") {
			t.Fatalf("output lacks the endpoint or the redaction mark: %s", out)
		}
	}
}

func TestLoadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{registry.EnvAccessKey: "ak", registry.EnvSecretKey: "sk", registry.EnvRegion: "eu-1"}
	getenv := func(k string) string { return env[k] }

	c, err := registry.LoadConfig(write("ok.yaml", "endpoint: 127.0.0.1:9000\nbucket: snaps\nchunk_size: 524288\n", 0o600), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "127.0.0.1:9000" || c.Bucket != "snaps" || c.AccessKey != "ak" || c.Region != "eu-1" || c.ChunkSize != 512<<10 {
		t.Fatalf("loaded %s", c)
	}
	c, err = registry.LoadConfig(write("ok.json", `{"endpoint":"s3.local:443","bucket":"x","secure":true,"access_key":"f","secret_key":"g"}`, 0o600), getenv)
	if err != nil || !c.Secure || c.AccessKey != "f" {
		t.Fatalf("json config: %s %v", c, err)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown.yaml", "endpoint: a:1\nbucket: b\nbukcet: c\n", "bukcet"},
		{"scheme.yaml", "endpoint: http://a:1\nbucket: b\n", "without a scheme"},
		{"every.yaml", "chunk_size: 1000\nca_file: /x\n", "endpoint is empty"},
	} {
		_, err := registry.LoadConfig(write(tc.name, tc.body, 0o600), getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	_, err = registry.LoadConfig(write("every2.yaml", "chunk_size: 1000\nca_file: /x\n", 0o600), getenv)
	for _, want := range []string{"endpoint is empty", "bucket is empty", "ca_file needs secure", "chunk_size 1000"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("every problem at once: %v lacks %q", err, want)
		}
	}
	if _, err := registry.LoadConfig(write("open.yaml", "endpoint: a:1\nbucket: b\n", 0o644), getenv); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("world-readable config: %v", err)
	}
	if _, err := registry.ConfigFromEnv(func(k string) string {
		return map[string]string{registry.EnvSecure: "maybe"}[k]
	}); err == nil || !strings.Contains(err.Error(), registry.EnvSecure) {
		t.Errorf("bad %s: %v", registry.EnvSecure, err)
	}
}
