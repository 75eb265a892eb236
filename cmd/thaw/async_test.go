package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// TestInvokeAsync: thaw invoke --async queues with ?async=true and the
// idempotency key as a header, and prints the id alone; settings of
// synchronous invocations with --async, or a key without it, are usage
// errors that send nothing.
func TestInvokeAsync(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.RequestURI()+" key="+r.Header.Get("Idempotency-Key")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/v1/async/async-0123456789abcdef0123")
		w.WriteHeader(http.StatusAccepted)
		io.WriteString(w, `{"id": "async-0123456789abcdef0123", "function": "hello"}`)
	}))
	defer srv.Close()
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := execute(context.Background(), append([]string{"--url", srv.URL}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}
	code, out, errs := run("invoke", "hello", "--async", "--idempotency-key", "order-42", "--event", `{"n": 1}`)
	if code != 0 || strings.TrimSpace(out) != "async-0123456789abcdef0123" {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "POST /v1/functions/hello/invoke?async=true key=order-42 ") || !strings.Contains(seen[0], `"n":1`) {
		t.Fatalf("requests: %q", seen)
	}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"invoke", "hello", "--async", "--logs"}, "--logs"},
		{[]string{"invoke", "hello", "--async", "--vm", "vm-run"}, "--vm"},
		{[]string{"invoke", "hello", "--async", "--strategy", "reap"}, "--strategy"},
		{[]string{"invoke", "hello", "--async", "--timeout-ms", "100"}, "--timeout-ms"},
		{[]string{"invoke", "hello", "--idempotency-key", "k"}, "goes with --async"},
	} {
		code, _, errs := run(c.args...)
		if code != 2 || !strings.Contains(errs, c.msg) {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming %s", c.args, code, errs, c.msg)
		}
	}
	if len(seen) != 1 {
		t.Errorf("usage errors sent requests: %q", seen[1:])
	}
}
