package apitest_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/api"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/wire"
)

// The checker catches what does not match the document, and passes what
// does.
func TestCheckerCatchesMismatches(t *testing.T) {
	c, err := apitest.Load(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CheckValue("NetworkPolicy", wire.Network{Egress: "none"}); err != nil {
		t.Errorf("a valid network: %v", err)
	}
	if err := c.CheckValue("NetworkPolicy", wire.Network{Egress: "everywhere"}); err == nil {
		t.Error("an egress outside the enum passed")
	}
	if err := c.CheckValue("NoSuchSchema", 1); err == nil {
		t.Error("an unknown schema passed")
	}
	req := httptest.NewRequest("GET", "/v1/functions/hello", nil)
	h := http.Header{"Content-Type": {"application/json"}}
	good := `{"name":"hello","digest":"abababababababababababababababababababababababababababababababab","code_dir":"/c","disk":"/d","memory_mib":256,"vcpus":1,` +
		`"network":{"egress":"none"},"created_at":"2026-11-24T00:00:00Z"}`
	if err := c.CheckResponse(req, 200, h, []byte(good)); err != nil {
		t.Errorf("a valid function: %v", err)
	}
	for _, bad := range []struct {
		status int
		body   string
	}{
		{200, `{"name":"hello"}`},                       // required fields missing
		{200, strings.Replace(good, `256`, `"256"`, 1)}, // a string for an integer
		{299, good}, // a status the operation does not have
		{404, `{"error":{"code":"not_found","message":"gone"}`}, // not JSON
	} {
		if err := c.CheckResponse(req, bad.status, h, []byte(bad.body)); err == nil {
			t.Errorf("%d %s passed", bad.status, bad.body)
		}
	}
	if err := c.CheckResponse(httptest.NewRequest("GET", "/v2/nothing", nil), 200, h, []byte(good)); err == nil {
		t.Error("a path the document lacks passed")
	}
}
