package api

import (
	"errors"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon"
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
	long := strings.Repeat("x", 100)
	for bad, want := range map[string]string{
		"env=NOVALUE":         `: env "NOVALUE": want NAME=VALUE`,
		"env=%3Dx":            `: env "=x": want NAME=VALUE`,
		"env=A%3D1&env=A%3D2": ": env A is given twice",
		"secret=X":            `: secret "X": want NAME=VALUE`,
		"secret=" + long:      `: secret "` + long[:80] + `": want NAME=VALUE`,
	} {
		q, _ := url.ParseQuery(bad)
		_, _, err := readConfigParams(q)
		if !errors.Is(err, daemon.ErrInvalid) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%.40s: error %v, want ErrInvalid ending %q", bad, err, want)
		}
	}
}
