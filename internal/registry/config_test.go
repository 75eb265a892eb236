package registry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
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

// A directory registry: type fs and an absolute path; the S3 fields and
// variables are not for it.
func TestLoadConfigFS(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	env := map[string]string{registry.EnvAccessKey: "ak", registry.EnvSecretKey: "sk", registry.EnvEndpoint: "a:1", registry.EnvChunkSize: "1048576"}
	getenv := func(k string) string { return env[k] }
	c, err := registry.LoadConfig(write("fs.json", `{"type":"fs","path":"/srv/thaw-registry"}`), getenv)
	if err != nil {
		t.Fatal(err)
	}
	if c.Type != registry.TypeFS || c.Path != "/srv/thaw-registry" || c.Endpoint != "" || c.AccessKey != "" || c.ChunkSize != 1<<20 {
		t.Fatalf("loaded %s", c)
	}
	if c.Location() != "/srv/thaw-registry" || !strings.Contains(c.String(), "path=/srv/thaw-registry") {
		t.Fatalf("location %q, string %s", c.Location(), c)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"nopath.yaml", "type: fs\n", "path is empty"},
		{"relative.yaml", "type: fs\npath: srv/registry\n", "absolute, clean path"},
		{"unclean.yaml", "type: fs\npath: /srv/../etc\n", "absolute, clean path"},
		{"mixed.yaml", "type: fs\npath: /srv/r\nbucket: b\n", "takes a path, not endpoint"},
		{"s3path.yaml", "endpoint: a:1\nbucket: b\npath: /srv/r\n", "path is for type fs"},
		{"type.yaml", "type: nfs\npath: /srv/r\n", `type "nfs"`},
	} {
		_, err := registry.LoadConfig(write(tc.name, tc.body), getenv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	// Open makes the directory store; it does not create the directory.
	st, err := registry.Open(registry.Config{Type: registry.TypeFS, Path: filepath.Join(dir, "registry")})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(context.Background()); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("ping of a missing directory: %v, want ErrNotFound", err)
	}
	if err := st.EnsureBucket(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := st.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
