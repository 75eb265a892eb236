package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The CLI prints a large result (8 MiB) whole, as JSON (--json) and indented.
func TestInvokeLargeResult(t *testing.T) {
	items := make([]string, 8<<10)
	for i := range items {
		items[i] = strings.Repeat("é", 500) // 1 KiB of UTF-8 each
	}
	result, _ := json.Marshal(items)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id": "inv-1", "function": "big", "vm": "vm-1", "mode": "cold", "ok": true, "timing": {"total_ms": 1},
  "result": `)
		w.Write(result)
		io.WriteString(w, "\n}\n")
	}))
	t.Cleanup(srv.Close)
	run := func(args ...string) string {
		var out, errb bytes.Buffer
		if code := execute(context.Background(), append([]string{"--url", srv.URL}, args...), strings.NewReader(""), &out, &errb); code != 0 {
			t.Fatalf("thaw %v: exit %d: %s", args, code, errb.String())
		}
		return out.String()
	}
	var inv struct{ Result json.RawMessage }
	if err := json.Unmarshal([]byte(run("--json", "invoke", "big")), &inv); err != nil || !jsonEqual(inv.Result, result) {
		t.Fatalf("--json: %v, result %d bytes, want %d", err, len(inv.Result), len(result))
	}
	out := run("invoke", "big")
	var got []string
	if err := json.NewDecoder(strings.NewReader(out)).Decode(&got); err != nil || len(got) != len(items) || got[7] != items[7] {
		t.Fatalf("printed result: %v, %d items", err, len(got))
	}
	if !strings.HasPrefix(out, "[\n  \"éé") {
		t.Fatalf("the result is not printed indented: %.40q", out)
	}
}

// jsonEqual compares two JSON texts as values.
func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}
