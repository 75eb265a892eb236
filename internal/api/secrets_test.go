package api

import (
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestSetSecretRefusesBadBodiesWithoutQuotingThem: whatever is wrong with
// the body, the answer is 400 and never repeats it.
func TestSetSecretRefusesBadBodiesWithoutQuotingThem(t *testing.T) {
	h := decodingHandler()
	for _, body := range []string{
		`{"value": s3cr3t-unquoted-value}`,
		`{"value": "s3cr3t-quoted-value", "extra": 1}`,
		`{"value": "s3cr3t-quoted-value"} trailing-s3cr3t`,
		`{"value": 12345678901234567890}`,
		`["s3cr3t-in-array"]`,
		``,
	} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest("PUT", "/v1/secrets/db", "application/json", body))
		if w.Code != 400 {
			t.Errorf("body %q: %d, want 400", body, w.Code)
		}
		if strings.Contains(w.Body.String(), "s3cr3t") || strings.Contains(w.Body.String(), "1234567890") {
			t.Errorf("body %q: the answer quotes it: %s", body, w.Body)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, localRequest("PUT", "/v1/secrets/db", "application/json", `{"value": "correct horse battery"}`))
	if w.Code != decoded {
		t.Errorf("a good body: %d %s", w.Code, w.Body)
	}
}

func TestConfigQueryParameters(t *testing.T) {
	q, _ := url.ParseQuery("env=GREETING%3Dhello%3Dworld&env=EMPTY%3D&secret=DB_PASSWORD%3Ddb")
	env, refs, err := readConfigParams(q)
	if err != nil || env["GREETING"] != "hello=world" || env["EMPTY"] != "" || len(env) != 2 || refs["DB_PASSWORD"] != "db" {
		t.Fatalf("env %v refs %v err %v", env, refs, err)
	}
	for _, bad := range []string{"env=NOVALUE", "env=%3Dx", "env=A%3D1&env=A%3D2", "secret=X"} {
		q, _ := url.ParseQuery(bad)
		if _, _, err := readConfigParams(q); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}
