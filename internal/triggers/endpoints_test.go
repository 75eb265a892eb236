package triggers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/wire"
)

func TestEndpointRequestBecomesEventAndResultResponse(t *testing.T) {
	inv := newTestInvoker()
	inv.set("echo", echo)
	inv.set("web", ok(`{"statusCode": 201, "headers": {"X-Made": "yes", "Content-Type": "text/plain"}, "cookies": ["a=1"], "body": "created"}`))
	inv.set("bin", ok(`{"statusCode": 200, "headers": {"Content-Type": "application/octet-stream"}, "body": "`+base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 255})+`", "isBase64Encoded": true}`))
	inv.set("plain", ok(`[1, 2, 3]`))
	tr := openTest(t, "", inv, nil)
	ctx := context.Background()
	for _, fn := range []string{"echo", "web", "bin", "plain"} {
		if _, err := tr.CreateEndpoint(ctx, wire.CreateEndpointRequest{Function: fn}); err != nil {
			t.Fatal(err)
		}
	}
	base := serveFunctions(t, tr)

	req, _ := http.NewRequest("POST", base+"/echo/a/b?x=1&y=2&x=3", strings.NewReader("héllo"))
	req.Header.Set("X-Custom", "v1")
	req.Header.Add("X-Custom", "v2")
	req.Header.Set("Cookie", "s=1; t=2")
	resp, body := httpDo(t, req)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("echo: %d %s: %s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	var ev HTTPEvent
	if err := json.Unmarshal([]byte(body), &ev); err != nil {
		t.Fatal(err)
	}
	if ev.Version != "2.0" || ev.RawPath != "/echo/a/b" || ev.RawQueryString != "x=1&y=2&x=3" || ev.Body != "héllo" || ev.IsBase64Encoded ||
		ev.Headers["x-custom"] != "v1,v2" || ev.QueryStringParameters["x"] != "1,3" || ev.RequestContext.HTTP.Method != "POST" ||
		ev.RequestContext.HTTP.SourceIP != "127.0.0.1" || !strings.HasPrefix(ev.RequestContext.RequestID, "req-") ||
		len(ev.Cookies) != 2 || ev.Cookies[1] != "t=2" || ev.RequestContext.RequestID != resp.Header.Get("X-Request-Id") {
		t.Fatalf("event: %+v", ev)
	}
	// A body that is not UTF-8 arrives in base64.
	req, _ = http.NewRequest("PUT", base+"/echo", bytes.NewReader([]byte{0xff, 0xfe, 0}))
	_, body = httpDo(t, req)
	_ = json.Unmarshal([]byte(body), &ev)
	if !ev.IsBase64Encoded || ev.Body != base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe, 0}) {
		t.Fatalf("binary body: %+v", ev)
	}

	resp, body = httpDo(t, mustReq("GET", base+"/web", ""))
	if resp.StatusCode != 201 || body != "created" || resp.Header.Get("X-Made") != "yes" || resp.Header.Get("Content-Type") != "text/plain" ||
		resp.Header.Get("Set-Cookie") != "a=1" {
		t.Fatalf("web: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	resp, body = httpDo(t, mustReq("GET", base+"/bin", ""))
	if resp.StatusCode != 200 || !bytes.Equal([]byte(body), []byte{0, 1, 2, 255}) {
		t.Fatalf("bin: %d %q", resp.StatusCode, body)
	}
	resp, body = httpDo(t, mustReq("GET", base+"/plain", ""))
	if resp.StatusCode != 200 || strings.TrimSpace(body) != "[1, 2, 3]" {
		t.Fatalf("plain: %d %q", resp.StatusCode, body)
	}
	// A prefix matches whole segments only.
	resp, _ = httpDo(t, mustReq("GET", base+"/echoes", ""))
	if resp.StatusCode != 404 {
		t.Fatalf("/echoes: %d, want 404", resp.StatusCode)
	}
}

func mustReq(method, url, body string) *http.Request {
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		panic(err)
	}
	return r
}

func TestEndpointKeysAndAdminToken(t *testing.T) {
	inv := newTestInvoker()
	inv.set("echo", echo)
	var logs bytes.Buffer
	cfg := Config{DataDir: t.TempDir(), AdminToken: "admin-token-0123456789"}
	tr, err := Open(context.Background(), cfg, inv, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	tr.Start(context.Background())
	t.Cleanup(tr.Close)
	ctx := context.Background()
	ep, err := tr.CreateEndpoint(ctx, wire.CreateEndpointRequest{Function: "echo", Name: "secure", PathPrefix: "/api/secure", Auth: AuthKey})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Key, keyPrefix) || len(ep.Key) < 40 {
		t.Fatalf("key %q", ep.Key)
	}
	got, _ := tr.GetEndpoint(ctx, "secure")
	if got.Key != "" || got.KeyHint != ep.Key[:8] {
		t.Fatalf("get shows %q, hint %q", got.Key, got.KeyHint)
	}
	base := serveFunctions(t, tr)
	status := func(hdr, val string) (int, string) {
		req := mustReq("POST", base+"/api/secure", `{}`)
		if hdr != "" {
			req.Header.Set(hdr, val)
		}
		resp, body := httpDo(t, req)
		return resp.StatusCode, body
	}
	if s, _ := status("", ""); s != 401 {
		t.Fatalf("no key: %d", s)
	}
	if s, _ := status(KeyHeader, ep.Key+"x"); s != 401 {
		t.Fatalf("wrong key: %d", s)
	}
	s, body := status("Authorization", "Bearer "+ep.Key)
	if s != 200 || strings.Contains(body, ep.Key) || strings.Contains(strings.ToLower(body), "authorization") {
		t.Fatalf("right key: %d %s (the function must not see the key)", s, body)
	}
	if s, _ := status(KeyHeader, ep.Key); s != 200 {
		t.Fatalf("key header: %d", s)
	}
	// The operator's token is refused, on a key endpoint and an open one.
	if s, _ := status("Authorization", "Bearer "+cfg.AdminToken); s != 403 {
		t.Fatalf("admin token: %d, want 403", s)
	}
	rot, err := tr.RotateEndpointKey(ctx, "secure")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := status(KeyHeader, ep.Key); s != 401 {
		t.Fatalf("old key after rotation: %d", s)
	}
	if s, _ := status(KeyHeader, rot.Key); s != 200 {
		t.Fatalf("new key: %d", s)
	}
	for _, k := range []string{ep.Key, rot.Key, cfg.AdminToken} {
		if strings.Contains(logs.String(), k) {
			t.Fatalf("a key or token is in the log:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), "operator's API token refused") {
		t.Fatalf("refusal not logged:\n%s", logs.String())
	}
}

func TestKeyMatchesComparesHashes(t *testing.T) {
	key, hash := newKey()
	for _, c := range []struct {
		presented string
		want      bool
	}{{key, true}, {key[:len(key)-1], false}, {"", false}, {strings.Repeat("x", 10000), false}, {key + "a", false}} {
		if got := keyMatches(c.presented, hash); got != c.want {
			t.Errorf("keyMatches(%.12q) = %v", c.presented, got)
		}
	}
	if keyMatches(key, "not-hex") {
		t.Error("a malformed stored hash matched")
	}
}

func TestOneOfDefaultsAndRefuses(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"", AuthNone, ""},
		{AuthKey, AuthKey, ""},
		{AuthNone, AuthNone, ""},
		{"token", "", `invalid request: auth "token": use none or key`},
	} {
		got, err := oneOf("auth", c.in, AuthNone, AuthKey)
		if c.err == "" && (err != nil || got != c.want) {
			t.Errorf("oneOf(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
		if c.err != "" && (!errors.Is(err, ErrInvalid) || err.Error() != c.err) {
			t.Errorf("oneOf(%q) error %v; want %q (ErrInvalid)", c.in, err, c.err)
		}
	}
}

func TestEndpointFailures(t *testing.T) {
	inv := newTestInvoker()
	inv.set("raises", raises)
	inv.set("slow", func(json.RawMessage) (*wire.Invocation, error) {
		return nil, fmt.Errorf("%w: invocation timed out after 1s", daemon.ErrTimeout)
	})
	inv.set("full", func(json.RawMessage) (*wire.Invocation, error) {
		return nil, fmt.Errorf("%w: no room", daemon.ErrTooMany)
	})
	inv.set("badresp", ok(`{"statusCode": 200, "headers": {"X-Bad": "a\r\nInjected: 1"}}`))
	inv.set("echo", echo)
	tr := openTest(t, "", inv, func(c *Config) { c.MaxBodyBytes = 1 << 10 })
	ctx := context.Background()
	for _, req := range []wire.CreateEndpointRequest{{Function: "raises"}, {Function: "raises", Name: "raises-open", ExposeErrors: true},
		{Function: "slow"}, {Function: "full"}, {Function: "badresp"}, {Function: "echo"}} {
		if _, err := tr.CreateEndpoint(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	base := serveFunctions(t, tr)
	check := func(path string, want int, has, hasNot string) *http.Response {
		t.Helper()
		resp, body := httpDo(t, mustReq("POST", base+path, `{}`))
		if resp.StatusCode != want || !strings.Contains(body, has) || (hasNot != "" && strings.Contains(body, hasNot)) {
			t.Fatalf("%s: %d %s; want %d with %q", path, resp.StatusCode, body, want, has)
		}
		return resp
	}
	check("/raises", 502, "function_error", "Traceback")
	check("/raises-open", 502, "secret", "")
	check("/slow", 504, "timeout", "")
	if r := check("/full", 503, "unavailable", ""); r.Header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	check("/badresp", 502, "bad_response", "Injected")
	check("/nowhere", 404, "no_endpoint", "")
	resp, body := httpDo(t, mustReq("POST", base+"/echo", strings.Repeat("a", 2<<10)))
	if resp.StatusCode != 413 {
		t.Fatalf("oversized body: %d %s", resp.StatusCode, body)
	}
	if n := len(inv.callsOf("echo")); n != 0 {
		t.Fatalf("an oversized request was invoked (%d calls)", n)
	}
	// A header flood is refused before anything runs.
	req := mustReq("POST", base+"/echo", `{}`)
	for i := range 2000 {
		req.Header.Set(fmt.Sprintf("X-Flood-%d", i), strings.Repeat("v", 40))
	}
	if resp, _ := httpDo(t, req); resp.StatusCode != 431 {
		t.Fatalf("header flood: %d, want 431", resp.StatusCode)
	}
	// Bad input to the operator's side: each a clear error.
	for _, bad := range []wire.CreateEndpointRequest{{Function: "Nope!"}, {Function: "ghost"}, {Function: "echo", Name: "echo"},
		{Function: "echo", Name: "other", PathPrefix: "/echo"}, {Function: "echo", Name: "x1", PathPrefix: "/a/../b"},
		{Function: "echo", Name: "x2", Auth: "password"}} {
		_, err := tr.CreateEndpoint(ctx, bad)
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrExists) {
			t.Errorf("create %+v: %v", bad, err)
		}
	}
}

func TestFunctionsListenerHTTP2AndSlowClients(t *testing.T) {
	tr := echoEndpoint(t)
	srv, err := tr.FunctionsServer(context.Background(), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if srv.ReadHeaderTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Fatalf("server timeouts unset: %+v", srv)
	}
	srv.ReadHeaderTimeout = 300 * time.Millisecond // a slowloris is cut off at this
	ln := tcptest.Listen(t)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	base := "http://" + ln.Addr().String()

	tp := &http.Transport{Protocols: new(http.Protocols)}
	tp.Protocols.SetUnencryptedHTTP2(true)
	req, _ := http.NewRequest("POST", base+"/echo", strings.NewReader("h2"))
	wantHTTP2OK(t, &http.Client{Transport: tp}, req, "h2c")

	// Keep-alive: two requests on one HTTP/1.1 connection.
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for range 2 {
		fmt.Fprintf(c, "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n")
		r, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
		if r.StatusCode != 200 {
			t.Fatalf("keep-alive: %d", r.StatusCode)
		}
	}

	// A slowloris sends half a header and waits: the server hangs up.
	s, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	fmt.Fprintf(s, "GET /echo HTTP/1.1\r\nHost: x\r\nX-Slow: ")
	start := time.Now()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = io.ReadAll(s)
	if err != nil || time.Since(start) > 3*time.Second {
		t.Fatalf("slowloris not cut off: %v after %s", err, time.Since(start))
	}
}

func TestEndpointWaitsForItsFunctionsSlots(t *testing.T) {
	inv := newTestInvoker()
	release := make(chan struct{})
	inv.set("one", func(json.RawMessage) (*wire.Invocation, error) {
		<-release
		return &wire.Invocation{OK: true, Result: json.RawMessage(`1`)}, nil
	})
	inv.maxConc["one"] = 1
	tr := openTest(t, "", inv, func(c *Config) { c.QueueTimeout = 300 * time.Millisecond })
	if _, err := tr.CreateEndpoint(context.Background(), wire.CreateEndpointRequest{Function: "one"}); err != nil {
		t.Fatal(err)
	}
	base := serveFunctions(t, tr)
	first := make(chan int)
	go func() {
		resp, _ := httpDo(t, mustReq("GET", base+"/one", ""))
		first <- resp.StatusCode
	}()
	waitFor(t, 5*time.Second, "the first request running", func() bool { return len(inv.callsOf("one")) == 1 })
	start := time.Now()
	resp, body := httpDo(t, mustReq("GET", base+"/one", ""))
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || time.Since(start) > 3*time.Second {
		t.Fatalf("second request: %d %s after %s", resp.StatusCode, body, time.Since(start))
	}
	if n := len(inv.callsOf("one")); n != 1 {
		t.Fatalf("the function ran %d times at once; its max_concurrency is 1", n)
	}
	// One that waits for the slot gets it when the first ends.
	second := make(chan int)
	go func() {
		resp, _ := httpDo(t, mustReq("GET", base+"/one", ""))
		second <- resp.StatusCode
	}()
	time.Sleep(100 * time.Millisecond)
	close(release)
	if a, b := <-first, <-second; a != 200 || b != 200 {
		t.Fatalf("statuses %d, %d", a, b)
	}
}

func TestFunctionsListenerHTTP2OverTLS(t *testing.T) {
	tr := echoEndpoint(t)
	cert, pool := selfSigned(t)
	srv, err := tr.FunctionsServer(context.Background(), &tls.Config{Certificates: []tls.Certificate{cert}}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ln := tcptest.Listen(t)
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	req, _ := http.NewRequest("GET", "https://"+ln.Addr().String()+"/echo", nil)
	wantHTTP2OK(t, c, req, "TLS")
}

// wantHTTP2OK sends req with c: the answer must be HTTP/2's 200.
func wantHTTP2OK(t *testing.T, c *http.Client, req *http.Request, what string) {
	t.Helper()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 || resp.StatusCode != 200 {
		t.Fatalf("%s: %s %d, want HTTP/2 200", what, resp.Proto, resp.StatusCode)
	}
}

// selfSigned is a certificate for 127.0.0.1 and a pool that trusts it.
func selfSigned(t *testing.T) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool
}
