package api

import (
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon"
)

func TestPaginate(t *testing.T) {
	rows := []string{"a", "b", "c", "d", "e"}
	key := func(s string) string { return s }
	var got []string
	after := ""
	for range 10 {
		page, next := paginate(rows, key, after, 2)
		got = append(got, page...)
		if next == "" {
			break
		}
		r := httptest.NewRequest("GET", "/v1/functions?limit=2&after="+next, nil)
		limit, a, err := pageOf(r)
		if err != nil || limit != 2 {
			t.Fatalf("cursor %q: %d %v", next, limit, err)
		}
		after = a
	}
	if len(got) != 5 || got[4] != "e" {
		t.Fatalf("pages gave %v", got)
	}
	for _, q := range []string{"limit=-1", "limit=1001", "limit=x", "after=!", "after=a.b"} {
		if _, _, err := pageOf(httptest.NewRequest("GET", "/v1/vms?"+q, nil)); !errors.Is(err, daemon.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", q, err)
		}
	}
	if limit, after, err := pageOf(httptest.NewRequest("GET", "/v1/vms", nil)); err != nil || limit != defaultPage || after != "" {
		t.Errorf("defaults: %d %q %v", limit, after, err)
	}
}

// Every answer carries its request's id, and an error body names it too.
func TestRequestIDs(t *testing.T) {
	h := newTestHandler()
	seen := map[string]bool{}
	for range 3 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest("GET", "/v1/nope", "", ""))
		id := w.Header().Get(RequestIDHeader)
		var b ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil || w.Code != 404 || id == "" || b.Error.RequestID != id || seen[id] {
			t.Fatalf("%d, header %q, body %s (%v)", w.Code, id, w.Body, err)
		}
		seen[id] = true
	}
}
