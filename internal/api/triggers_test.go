package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAsyncInvokeTakesAnEventOnly: POST .../invoke?async=true with a
// setting of synchronous invocations (or a bad async value) is 400 with
// what is wrong, and queues nothing (the handler has no engine: reaching it
// would be 503 engine_unavailable).
func TestAsyncInvokeTakesAnEventOnly(t *testing.T) {
	h := NewServices(noDaemon(), discard, Options{Token: testToken})
	for _, c := range []struct{ query, body, want string }{
		{"async=true", `{"event": {}, "strategy": "reap"}`, "takes an event only"},
		{"async=true", `{"event": {}, "snapshot": "snap-0123456789ab"}`, "takes an event only"},
		{"async=true", `{"event": {}, "evict_cache": true}`, "takes an event only"},
		{"async=true", `{"event": {}, "strict": true}`, "takes an event only"},
		{"async=true", `{"event": {}, "logs": true}`, "takes an event only"},
		{"async=true", `{"event": {}, "timeout_ms": 500}`, "synchronous invocations only"},
		{"async=yes", `{"event": {}}`, "want true or false"},
	} {
		req := httptest.NewRequest("POST", "http://127.0.0.1/v1/functions/hello/invoke?"+c.query, strings.NewReader(c.body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var doc struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.Unmarshal(rec.Body.Bytes(), &doc)
		if rec.Code != http.StatusBadRequest || !strings.Contains(doc.Error.Message, c.want) {
			t.Errorf("%s %s: %d %s, want 400 saying %q", c.query, c.body, rec.Code, rec.Body, c.want)
		}
	}
	// The same request without the offending setting gets through to the
	// engine, which this handler lacks.
	req := httptest.NewRequest("POST", "http://127.0.0.1/v1/functions/hello/invoke?async=true", strings.NewReader(`{"event": {}}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "engine_unavailable") {
		t.Errorf("a plain async request: %d %s, want 503 engine_unavailable", rec.Code, rec.Body)
	}
}

// TestTriggerRoutesWithoutEngine: a daemon that runs no triggers answers
// each of their routes 503 engine_unavailable, naming what is missing.
func TestTriggerRoutesWithoutEngine(t *testing.T) {
	h := NewServices(noDaemon(), discard, Options{Token: testToken})
	for _, route := range []string{
		"GET /v1/endpoints/web", "DELETE /v1/endpoints/web", "POST /v1/endpoints/web/rotate-key",
		"GET /v1/functions/hello/async", "DELETE /v1/functions/hello/async", "GET /v1/async/0123456789abcdef",
		"GET /v1/dead-letters/7", "GET /v1/schedules/nightly", "DELETE /v1/schedules/nightly",
		"POST /v1/schedules/nightly/pause", "POST /v1/schedules/nightly/resume",
	} {
		method, path, _ := strings.Cut(route, " ")
		req := httptest.NewRequest(method, "http://127.0.0.1"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "engine_unavailable") ||
			!strings.Contains(rec.Body.String(), "runs no triggers") {
			t.Errorf("%s: %d %s, want 503 engine_unavailable", route, rec.Code, rec.Body)
		}
	}
}
