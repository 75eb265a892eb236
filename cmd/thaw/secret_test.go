package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secretJSON = `{"name": "db", "version": 2, "digest": "` + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" +
	`", "created_at": "2025-01-02T03:04:05Z", "updated_at": "2025-01-02T03:04:05Z"}`

// secretDaemon answers the secret routes and function creation, and
// records what it was sent.
func secretDaemon(t *testing.T) *fakeDaemon {
	t.Helper()
	f := &fakeDaemon{bodies: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/secrets/{name}", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, secretJSON) })
	mux.HandleFunc("GET /v1/secrets", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, `{"items": [`+secretJSON+`]}`) })
	mux.HandleFunc("DELETE /v1/secrets/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(409)
		io.WriteString(w, `{"error":{"code":"conflict","message":"secret \"db\" is used by function(s) app; delete them first"}}`)
	})
	mux.HandleFunc("POST /v1/functions", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		io.WriteString(w, `{"name": "app", "digest": "ab", "code_dir": "/c", "disk": "/d", "memory_mib": 256, "vcpus": 1,
		  "network": {"egress": "none"}, "created_at": "2025-01-02T03:04:05Z",
		  "env": {"LOG_LEVEL": "info"}, "secrets": {"DB_PASSWORD": "db"},
		  "warnings": ["handler.py:3: random.random() runs at import: draw it in handle()"]}`)
	})
	return f.serve(t, mux)
}

func sentValue(t *testing.T, f *fakeDaemon) string {
	t.Helper()
	var body struct{ Value string }
	if err := json.Unmarshal(f.body("PUT /v1/secrets/db"), &body); err != nil {
		t.Fatal(err)
	}
	return body.Value
}

// TestSecretSet: the value comes from standard input (one trailing
// newline dropped) or a file (exactly), and is never printed.
func TestSecretSet(t *testing.T) {
	f := secretDaemon(t)
	value := "s3cr3t-value-from-stdin"
	for _, args := range [][]string{{"secret", "set", "db"}, {"--json", "secret", "set", "db"}} {
		r := f.thawStdin(t, value+"\n", args...)
		wantCode(t, r, 0)
		if got := sentValue(t, f); got != value {
			t.Errorf("sent %q, want %q", got, value)
		}
		if strings.Contains(r.stdout+r.stderr, value) {
			t.Errorf("thaw %v printed the value", args)
		}
	}
	wantContains(t, "stdout", f.thaw(t, "secret", "list").stdout, "db", "2", "0123456789ab")

	path := filepath.Join(t.TempDir(), "value")
	if err := os.WriteFile(path, []byte("from a file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantCode(t, f.thaw(t, "secret", "set", "db", "--from-file", path), 0)
	if got := sentValue(t, f); got != "from a file\n" {
		t.Errorf("sent %q from the file", got)
	}
	r := f.thawStdin(t, "", "secret", "set", "db")
	wantFailure(t, r, 2, "no value on standard input")
	r = f.thaw(t, "secret", "delete", "db")
	wantFailure(t, r, 1, "used by function(s) app")
}

// TestFunctionCreateConfig: --env and --secret reach the daemon as the
// archive upload's query, and the function shows them.
func TestFunctionCreateConfig(t *testing.T) {
	f := secretDaemon(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "handler.py"), []byte("def handle(e): return e\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := f.thaw(t, "function", "create", "app", "--dir", dir, "--env", "LOG_LEVEL=info", "--env", "URL=a=b",
		"--secret", "DB_PASSWORD=db")
	wantCode(t, r, 0)
	wantContains(t, "stdout", r.stdout, "Env:", "LOG_LEVEL=info", "Secrets:", "DB_PASSWORD = secret db",
		"Warnings:", "handler.py:3: random.random() runs at import")
	f.mu.Lock()
	req := f.requests[len(f.requests)-1]
	f.mu.Unlock()
	u, _ := url.Parse(req)
	q := u.Query()
	if strings.Join(q["env"], ",") != "LOG_LEVEL=info,URL=a=b" && strings.Join(q["env"], ",") != "URL=a=b,LOG_LEVEL=info" {
		t.Errorf("env %q", q["env"])
	}
	if strings.Join(q["secret"], ",") != "DB_PASSWORD=db" {
		t.Errorf("secret %q", q["secret"])
	}
	for _, bad := range [][]string{{"--env", "NOVALUE"}, {"--env", "A=1", "--env", "A=2"}, {"--secret", "=db"}} {
		r := f.thaw(t, append([]string{"function", "create", "app", "--dir", dir}, bad...)...)
		wantCode(t, r, 2)
	}
}
