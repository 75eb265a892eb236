package httpreq

import (
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
)

// Ids have one form and do not repeat.
func TestNewID(t *testing.T) {
	re := regexp.MustCompile(`^req-[0-9a-f]{16}$`)
	seen := map[string]bool{}
	for range 100 {
		id := NewID()
		if !re.MatchString(id) || seen[id] {
			t.Fatalf("id %q: malformed or repeated", id)
		}
		seen[id] = true
	}
}

// The status is 200 unless the handler writes another, which reaches the
// client; the writer unwraps to the one it wraps.
func TestStatusWriter(t *testing.T) {
	rec := httptest.NewRecorder()
	sw := NewStatusWriter(rec)
	if sw.Status != http.StatusOK {
		t.Fatalf("status before any header: %d", sw.Status)
	}
	sw.WriteHeader(http.StatusTeapot)
	if sw.Status != http.StatusTeapot || rec.Code != http.StatusTeapot {
		t.Fatalf("status %d, client got %d; want 418", sw.Status, rec.Code)
	}
	if sw.Unwrap() != rec {
		t.Fatal("Unwrap is not the wrapped writer")
	}
}
