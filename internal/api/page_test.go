package api

import (
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
