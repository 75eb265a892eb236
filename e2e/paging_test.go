package e2e

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
)

// Every list pages: following the next cursors two at a time gives the
// same items, in the same order, as one page of all of them; a cursor the
// API did not give is 400.
func TestListsPage(t *testing.T) {
	f, c := bootedFixture(t)
	ctx := ctxT(t)
	for range 3 { // at least a few invocations and snapshots to page over
		if _, err := c.InvokeVM(ctx, f.vm.ID, ev(`{}`), client.InvokeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.CopySnapshot(ctx, f.snap.ID); err != nil {
		t.Fatal(err)
	}
	check, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path string, q url.Values) (int, []string, string) {
		req, _ := http.NewRequest("GET", f.e.srv.URL+path+"?"+q.Encode(), nil)
		req.Header.Set("Authorization", "Bearer "+f.e.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Items []struct {
				ID   string `json:"id"`
				Name string `json:"name"`
			} `json:"items"`
			Next string `json:"next"`
		}
		var raw json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&raw); err != nil {
			t.Fatal(err)
		}
		if err := check.CheckResponse(req, resp.StatusCode, resp.Header, raw); err != nil {
			t.Error(err)
		}
		_ = json.Unmarshal(raw, &body)
		var ids []string
		for _, it := range body.Items {
			ids = append(ids, it.ID+it.Name)
		}
		return resp.StatusCode, ids, body.Next
	}
	for _, path := range []string{"/v1/invocations", "/v1/snapshots", "/v1/vms", "/v1/functions"} {
		status, whole, next := get(path, url.Values{"limit": {"1000"}})
		if status != 200 || next != "" || len(whole) == 0 {
			t.Fatalf("%s: %d, %d items, next %q", path, status, len(whole), next)
		}
		var paged []string
		q := url.Values{"limit": {"2"}}
		for pages := 0; ; pages++ {
			status, ids, next := get(path, q)
			if status != 200 || len(ids) > 2 || pages > len(whole) {
				t.Fatalf("%s page %d: %d, %v", path, pages, status, ids)
			}
			paged = append(paged, ids...)
			if next == "" {
				break
			}
			q.Set("after", next)
		}
		if !slices.Equal(paged, whole) {
			t.Errorf("%s: paged %v, whole %v", path, paged, whole)
		}
		if status, _, _ := get(path, url.Values{"after": {"not a cursor!"}}); status != 400 {
			t.Errorf("%s with a bad cursor: %d, want 400", path, status)
		}
		if status, _, _ := get(path, url.Values{"limit": {"1001"}}); status != 400 {
			t.Errorf("%s with limit 1001: %d, want 400", path, status)
		}
	}
}
