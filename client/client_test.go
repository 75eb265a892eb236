package client

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// authServer records the Authorization header of each request and answers
// with status.
type authServer struct {
	mu    sync.Mutex
	auths []string
}

func (a *authServer) handler(status int) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.auths = append(a.auths, r.Header.Get("Authorization"))
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status >= 300 {
			w.Write([]byte(`{"error":{"code":"x","message":"refused"}}`))
		} else {
			w.Write([]byte(`{"version":"0.1.0"}`))
		}
	})
}

func (a *authServer) last() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.auths) == 0 {
		return "<no request>"
	}
	return a.auths[len(a.auths)-1]
}

// clearEnv makes the token sources empty, and DefaultTokenFile is not
// consulted when THAW_TOKEN_FILE names a file.
func clearEnv(t *testing.T) {
	t.Setenv("THAW_TOKEN", "")
	t.Setenv("THAW_TOKEN_FILE", "")
	t.Setenv("THAW_CACERT", "")
}

func TestTokenSources(t *testing.T) {
	clearEnv(t)
	var a authServer
	srv := httptest.NewServer(a.handler(200))
	defer srv.Close()
	ctx := context.Background()

	t.Setenv("THAW_TOKEN", " from-env \n")
	file := filepath.Join(t.TempDir(), "token")
	os.WriteFile(file, []byte("from-file\n"), 0o600)
	t.Setenv("THAW_TOKEN_FILE", file)
	c, err := NewFromEnv(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); err != nil || a.last() != "Bearer from-env" {
		t.Errorf("THAW_TOKEN first: sent %q (%v)", a.last(), err)
	}
	t.Setenv("THAW_TOKEN", "")
	if c, err = NewFromEnv(srv.URL); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Info(ctx); err != nil || a.last() != "Bearer from-file" || !c.HasToken() {
		t.Errorf("THAW_TOKEN_FILE next: sent %q (%v)", a.last(), err)
	}
	t.Setenv("THAW_TOKEN_FILE", filepath.Join(t.TempDir(), "missing"))
	if _, err := NewFromEnv(srv.URL); err == nil || !strings.Contains(err.Error(), "THAW_TOKEN_FILE") {
		t.Errorf("missing THAW_TOKEN_FILE: %v", err)
	}
}

// TestTokenNeverSentOverUnixSocket: the socket's permissions are the
// control; a token in the environment stays home.
func TestTokenNeverSentOverUnixSocket(t *testing.T) {
	clearEnv(t)
	t.Setenv("THAW_TOKEN", "secret-token")
	sock := filepath.Join(t.TempDir(), "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var a authServer
	srv := &http.Server{Handler: a.handler(200)}
	go srv.Serve(ln)
	defer srv.Close()
	for _, c := range []*Client{New("unix:"+sock, WithToken("secret-token")), must(NewFromEnv("unix:" + sock))} {
		if _, err := c.Info(context.Background()); err != nil {
			t.Fatal(err)
		}
		if a.last() != "" || c.HasToken() {
			t.Errorf("sent Authorization %q over the Unix socket", a.last())
		}
	}
}

func must(c *Client, err error) *Client {
	if err != nil {
		panic(err)
	}
	return c
}

func TestTokenNotSentInClearOffLoopback(t *testing.T) {
	c := New("http://thaw.example:7380", WithToken("secret"))
	if _, err := c.Info(context.Background()); err == nil || !strings.Contains(err.Error(), "plain http") {
		t.Errorf("token over plain http off loopback: %v", err)
	}
	for _, base := range []string{"http://127.0.0.1:7380", "http://localhost:7380", "http://[::1]:7380", "https://thaw.example"} {
		if c := New(base, WithToken("secret")); c.err != nil {
			t.Errorf("%s: %v", base, c.err)
		}
	}
}

func TestStatusesAreTypedErrors(t *testing.T) {
	clearEnv(t)
	for status, kind := range map[int]error{400: ErrInvalid, 401: ErrUnauthorized, 403: ErrForbidden, 404: ErrNotFound,
		409: ErrConflict, 415: ErrUnsupportedMediaType, 422: ErrSnapshotUnusable, 429: ErrTooMany, 502: ErrVMFailed,
		504: ErrTimeout, 500: ErrServer, 413: ErrServer} {
		var a authServer
		srv := httptest.NewServer(a.handler(status))
		_, err := New(srv.URL).Info(context.Background())
		srv.Close()
		var ae *APIError
		if !errors.Is(err, kind) || !errors.As(err, &ae) || ae.Status != status || ae.Message != "refused" {
			t.Errorf("status %d: %v, want %v", status, err, kind)
		}
	}
}

// TestHealth: 200 is the daemon's Health; 503 is its Health with an error
// wrapping ErrUnavailable; anything else (a proxy's 502 page) an APIError.
func TestHealth(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
		kind   error
	}{
		{200, `{"status":"ok","node":"n1"}`, "ok", nil},
		{503, `{"status":"draining","node":"n1"}`, "draining", ErrUnavailable},
		{502, `<html>bad gateway</html>`, "", ErrVMFailed},
		{200, `not json`, "", nil},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/health" {
				t.Errorf("path %s", r.URL.Path)
			}
			w.WriteHeader(c.status)
			w.Write([]byte(c.body))
		}))
		h, err := New(srv.URL).Health(context.Background())
		srv.Close()
		switch {
		case c.want == "" && err == nil:
			t.Errorf("%d %s: no error", c.status, c.body)
		case c.kind != nil && !errors.Is(err, c.kind):
			t.Errorf("%d: error %v, want %v", c.status, err, c.kind)
		case c.want != "" && (h == nil || h.Status != c.want || h.Node != "n1"):
			t.Errorf("%d: health %+v (%v)", c.status, h, err)
		}
	}
}
