package triggers

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http/httpguts"
)

// FuzzResponseOf: whatever a function returns, the answer is a valid
// HTTP response or an error, never a panic; headers that reach the
// caller are valid and never the connection's.
func FuzzResponseOf(f *testing.F) {
	for _, seed := range []string{`{"statusCode": 200, "body": "x"}`, `[1,2]`, `"text"`, `null`, ``,
		`{"statusCode": 302, "headers": {"Location": "/x", "n": 1, "b": true}, "cookies": ["a=1"]}`,
		`{"statusCode": 200, "headers": {"X": "a\r\nB: c"}}`, `{"statusCode": 99}`, `{"statusCode": "200"}`,
		`{"statusCode": 200, "body": "AAEC", "isBase64Encoded": true}`, `{"statusCode": 200, "body": {"a": 1}}`,
		`{"statusCode": 200, "multiValueHeaders": {"X-A": ["1", "2"]}, "headers": {"Content-Length": "5"}}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, err := responseOf(json.RawMessage(b))
		if err != nil {
			return
		}
		if resp.status < 200 || resp.status > 599 {
			t.Fatalf("status %d", resp.status)
		}
		for name, vals := range resp.header {
			if hopHeaders[strings.ToLower(name)] {
				t.Fatalf("connection header %q passed", name)
			}
			for _, v := range vals {
				if !httpguts.ValidHeaderFieldName(name) || !httpguts.ValidHeaderFieldValue(v) {
					t.Fatalf("invalid header %q: %q", name, v)
				}
			}
		}
	})
}

// FuzzEventOf: any request (path, query, headers, body) maps to an event
// that is valid JSON and never carries the key headers.
func FuzzEventOf(f *testing.F) {
	f.Add("/a/b", "x=1&y=%zz", "Bearer k", "c=1; d", []byte("body"))
	f.Add("/", "", "", "", []byte{0xff, 0xfe})
	f.Fuzz(func(t *testing.T, path, query, auth, cookie string, body []byte) {
		r := httptest.NewRequest("POST", "http://h/", nil)
		r.URL.Path, r.URL.RawQuery = path, query
		r.Header.Set("Authorization", auth)
		r.Header.Set("X-Thaw-Key", auth)
		r.Header.Set("Cookie", cookie)
		ev := eventOf(r, body, "ep", "req-1", time.Unix(0, 0))
		b, err := json.Marshal(ev)
		if err != nil || !json.Valid(b) {
			t.Fatalf("event does not encode: %v", err)
		}
		if _, ok := ev.Headers["authorization"]; ok {
			t.Fatal("authorization reached the event")
		}
		if _, ok := ev.Headers["x-thaw-key"]; ok {
			t.Fatal("x-thaw-key reached the event")
		}
	})
}
