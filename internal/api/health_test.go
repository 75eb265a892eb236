package api

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/thaw-dev/thaw/wire"
)

// TestHealth: 200 ok while serving, 503 while starting or draining, without
// a token or an allowed Host; every answer names the node.
func TestHealth(t *testing.T) {
	h := NewServices(noDaemon(), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Token: testToken, NodeName: "node-7"})
	for _, tc := range []struct {
		state  State
		status int
		want   string
	}{
		{Serving, http.StatusOK, wire.HealthOK},
		{Starting, http.StatusServiceUnavailable, wire.HealthStarting},
		{Draining, http.StatusServiceUnavailable, wire.HealthDraining},
	} {
		h.SetState(tc.state)
		r := httptest.NewRequest("GET", "/v1/health", nil)
		r.Host = "10.1.2.3:7443" // a balancer's check: no token, a Host no --allowed-host names
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		var body wire.Health
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("%v: body %q: %v", tc.state, w.Body, err)
		}
		if w.Code != tc.status || body.Status != tc.want || body.Node != "node-7" || w.Header().Get(NodeHeader) != "node-7" {
			t.Errorf("%v: %d %+v (Thaw-Node %q), want %d %s", tc.state, w.Code, body, w.Header().Get(NodeHeader), tc.status, tc.want)
		}
	}
}

// TestStartingRefusesOtherRoutes: while starting, every other route is 503
// unavailable with Retry-After (after the token check); draining serves.
func TestStartingRefusesOtherRoutes(t *testing.T) {
	h := NewServices(noDaemon(), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Token: testToken, NodeName: "n"})
	h.SetState(Starting)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, localRequest("GET", "/v1/openapi.json", "", ""))
	var e ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &e); err != nil || w.Code != http.StatusServiceUnavailable ||
		e.Error.Code != codeUnavailable || w.Header().Get("Retry-After") == "" || w.Header().Get(NodeHeader) != "n" {
		t.Fatalf("starting: %d %q %v", w.Code, w.Body, err)
	}
	noToken := localRequest("GET", "/v1/openapi.json", "", "")
	noToken.Header.Del("Authorization")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, noToken)
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("starting, no token: %d, want 401 first", w.Code)
	}
	h.SetState(Draining)
	w = httptest.NewRecorder()
	h.ServeHTTP(w, localRequest("GET", "/v1/openapi.json", "", ""))
	if w.Code != http.StatusOK {
		t.Fatalf("draining: %d, want requests still served", w.Code)
	}
}
