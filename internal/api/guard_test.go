package api

// The guard's rules (admit), each through the real handler and, where the
// HTTP stack matters (Host, chunked bodies), a real TCP server. Routes are
// replaced by recorders, so "refused" also means "the route never ran":
// nothing was created.

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/daemon"
)

const testToken = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// localRequest is a TCP request to a loopback address carrying testToken.
func localRequest(method, target, contentType, body string) *http.Request {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	r := httptest.NewRequest(method, target, rd)
	r.Host = "127.0.0.1:7380"
	r.Header.Set("Authorization", "Bearer "+testToken)
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return r
}

// recorder notes every route reached and the caller it saw.
type recorder struct {
	mu    sync.Mutex
	calls []reachedRoute
}

type reachedRoute struct {
	pattern   string
	caller    daemon.Caller
	hasCaller bool
}

func (rec *recorder) reached() []reachedRoute {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]reachedRoute(nil), rec.calls...)
}

// recordingHandler is the real handler (guard, routing, errors) whose routes
// record the call and answer 200 with the caller instead of calling the
// service.
func recordingHandler(opts Options) (*Handler, *recorder) {
	h := NewServices(noDaemon(), discard, opts)
	rec := &recorder{}
	mux := http.NewServeMux()
	for _, r := range h.routes() {
		pattern := r.Method + " " + r.Pattern
		mux.HandleFunc(pattern, func(w http.ResponseWriter, req *http.Request) {
			c, ok := daemon.CallerFrom(req.Context())
			rec.mu.Lock()
			rec.calls = append(rec.calls, reachedRoute{pattern, c, ok})
			rec.mu.Unlock()
			writeJSON(w, http.StatusOK, c)
		})
	}
	h.mux = mux
	return h, rec
}

func serveOne(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// wantRefused checks an error answer with its code, whose message
// mentions contains, and that no route ran.
func wantRefused(t *testing.T, what string, w *httptest.ResponseRecorder, rec *recorder, status int, code, contains string) {
	t.Helper()
	var b ErrorBody
	if err := json.Unmarshal(w.Body.Bytes(), &b); err != nil {
		t.Fatalf("%s: body %q is not an Error: %v", what, w.Body, err)
	}
	if w.Code != status || b.Error.Code != code || !strings.Contains(b.Error.Message, contains) {
		t.Errorf("%s: %d %s %q, want %d %s mentioning %q", what, w.Code, b.Error.Code, b.Error.Message, status, code, contains)
	}
	if calls := rec.reached(); len(calls) > 0 {
		t.Errorf("%s: the route ran although the request was refused: %+v", what, calls)
	}
}

func wantServed(t *testing.T, what string, w *httptest.ResponseRecorder, rec *recorder) {
	t.Helper()
	if w.Code != http.StatusOK || len(rec.reached()) == 0 {
		t.Errorf("%s: %d %s, want 200 from the route", what, w.Code, strings.TrimSpace(w.Body.String()))
	}
}

func TestTokenRequiredOverTCP(t *testing.T) {
	for _, c := range []struct {
		name, auth, contains string
		wantInvalid          bool
	}{
		{"no token", "", "token is required", false},
		{"wrong token, same length", "Bearer " + strings.Repeat("f", len(testToken)), "wrong", true},
		{"prefix of the token", "Bearer " + testToken[:40], "wrong", true},
		{"token and more", "Bearer " + testToken + "00", "wrong", true},
		{"empty bearer", "Bearer ", "wrong", true},
		{"basic scheme", "Basic " + testToken, "Bearer", false},
		{"token without scheme", testToken, "Bearer", false},
	} {
		h, rec := recordingHandler(Options{Token: testToken})
		r := localRequest("GET", "/v1/functions", "", "")
		r.Header.Del("Authorization")
		if c.auth != "" {
			r.Header.Set("Authorization", c.auth)
		}
		w := serveOne(h, r)
		wantRefused(t, c.name, w, rec, http.StatusUnauthorized, codeUnauthenticated, c.contains)
		if got := w.Header().Get("WWW-Authenticate"); !strings.HasPrefix(got, `Bearer realm="thaw"`) {
			t.Errorf("%s: WWW-Authenticate %q", c.name, got)
		}
		if got := strings.Contains(w.Header().Get("WWW-Authenticate"), `error="invalid_token"`); got != c.wantInvalid {
			t.Errorf("%s: WWW-Authenticate %q, invalid_token wanted: %v", c.name, w.Header().Get("WWW-Authenticate"), c.wantInvalid)
		}
	}

	h, rec := recordingHandler(Options{Token: testToken})
	r := localRequest("GET", "/v1/functions", "", "")
	r.Header.Set("Authorization", "bearer  "+testToken+" ") // scheme is case-insensitive
	wantServed(t, "right token", serveOne(h, r), rec)
	if c := rec.reached()[0]; !c.hasCaller || c.caller.Unix {
		t.Errorf("a TCP request reached its route with caller %+v (set: %v), want Unix=false", c.caller, c.hasCaller)
	}

	// Unknown paths are 401 too: nothing is learnt without the token.
	h, rec = recordingHandler(Options{Token: testToken})
	r = localRequest("GET", "/v1/nothing", "", "")
	r.Header.Del("Authorization")
	wantRefused(t, "unknown path", serveOne(h, r), rec, http.StatusUnauthorized, codeUnauthenticated, "token")

	// No token configured: TCP is closed, whatever the request sends.
	h, rec = recordingHandler(Options{})
	r = localRequest("GET", "/v1/functions", "", "")
	r.Header.Set("Authorization", "Bearer ")
	wantRefused(t, "no token configured", serveOne(h, r), rec, http.StatusUnauthorized, codeUnauthenticated, "no API token")
}

func TestTokenMatches(t *testing.T) {
	for _, c := range []struct {
		got  string
		want bool
	}{
		{testToken, true}, {"", false}, {testToken[:63], false}, {testToken + "0", false},
		{strings.ToUpper(testToken), false}, {"1" + testToken[1:], false},
	} {
		if got := tokenMatches(c.got, testToken); got != c.want {
			t.Errorf("tokenMatches(%q) = %v, want %v", c.got, got, c.want)
		}
	}
}

// TestTokenComparedInConstantTime reads guard.go: tokenMatches must use
// crypto/subtle, and the configured token may only be compared with == to
// "" (is one configured); any other == on it would leak through timing.
func TestTokenComparedInConstantTime(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "guard.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	usesSubtle := false
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncDecl:
			if n.Name.Name == "tokenMatches" {
				ast.Inspect(n.Body, func(m ast.Node) bool {
					if sel, ok := m.(*ast.SelectorExpr); ok && sel.Sel.Name == "ConstantTimeCompare" {
						if id, ok := sel.X.(*ast.Ident); ok && id.Name == "subtle" {
							usesSubtle = true
						}
					}
					return true
				})
			}
		case *ast.BinaryExpr:
			if n.Op != token.EQL && n.Op != token.NEQ {
				return true
			}
			for _, side := range [][2]ast.Expr{{n.X, n.Y}, {n.Y, n.X}} {
				if sel, ok := side[0].(*ast.SelectorExpr); ok && sel.Sel.Name == "Token" {
					if lit, ok := side[1].(*ast.BasicLit); !ok || lit.Value != `""` {
						t.Errorf("guard.go compares the token with %s: use tokenMatches (constant time)", n.Op)
					}
				}
			}
		}
		return true
	})
	if !usesSubtle {
		t.Error("tokenMatches does not call subtle.ConstantTimeCompare")
	}
}

// TestCrossSitePostCreatesNothing is the attack found on the old code: a
// web page's text/plain POST (which needs no CORS preflight) created a
// function. Refused whether or not the page somehow has the token, and
// over the Unix socket too (a local proxy could forward it).
func TestCrossSitePostCreatesNothing(t *testing.T) {
	body := `{"name":"pwned","directory":"/etc"}`
	for _, c := range []struct {
		name   string
		unix   bool
		token  bool
		origin string
		status int
		code   string
	}{
		{"browser over TCP, no token", false, false, "http://evil.example", 403, codeForbidden},
		{"browser over TCP, with the token", false, true, "http://evil.example", 403, codeForbidden},
		{"browser through the socket", true, false, "http://evil.example", 403, codeForbidden},
		{"text/plain without Origin over TCP", false, true, "", 415, codeUnsupportedType},
		{"text/plain without Origin through the socket", true, false, "", 415, codeUnsupportedType},
	} {
		h, rec := recordingHandler(Options{Token: testToken})
		r := localRequest("POST", "/v1/functions", "text/plain;charset=UTF-8", body)
		if !c.token {
			r.Header.Del("Authorization")
		}
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.unix {
			r = r.WithContext(daemon.WithCaller(r.Context(), daemon.Caller{Unix: true}))
		}
		wantRefused(t, c.name, serveOne(h, r), rec, c.status, c.code, "")
	}
	// Form encodings are refused the same way.
	for _, ct := range []string{"application/x-www-form-urlencoded", "multipart/form-data; boundary=x"} {
		h, rec := recordingHandler(Options{Token: testToken})
		wantRefused(t, ct, serveOne(h, localRequest("POST", "/v1/functions", ct, body)), rec, 415, codeUnsupportedType, "application/json")
	}
}

func TestOriginRefusedUnlessAllowed(t *testing.T) {
	opts := Options{Token: testToken, AllowedOrigins: []string{"https://dash.example/", "http://127.0.0.1:8080"}}
	for _, c := range []struct {
		origin, site string
		ok           bool
	}{
		{"http://evil.example", "", false},
		{"null", "", false},
		{"https://dash.example.evil.example", "", false},
		{"http://dash.example", "", false}, // another scheme is another origin
		{"https://dash.example", "", true},
		{"HTTPS://DASH.EXAMPLE", "", true},
		{"http://127.0.0.1:8080", "cross-site", true},
		{"", "cross-site", false}, // a cross-site GET carries no Origin
		{"", "same-site", false},
		{"", "same-origin", true},
		{"", "none", true}, // typed in the address bar
	} {
		h, rec := recordingHandler(opts)
		r := localRequest("POST", "/v1/vms", "application/json", `{"function":"hello"}`)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.site != "" {
			r.Header.Set("Sec-Fetch-Site", c.site)
		}
		what := "Origin " + c.origin + " Sec-Fetch-Site " + c.site
		if w := serveOne(h, r); c.ok {
			wantServed(t, what, w, rec)
		} else {
			wantRefused(t, what, w, rec, 403, codeForbidden, "")
		}
	}
}

func TestHostRefusedUnlessLoopbackOrAllowed(t *testing.T) {
	opts := Options{Token: testToken, AllowedHosts: []string{"thaw.internal", "10.0.0.5:7443", "[fd00::1]"}}
	for _, c := range []struct {
		host string
		ok   bool
	}{
		{"localhost", true}, {"LOCALHOST:7380", true}, {"127.0.0.1", true}, {"127.1.2.3:9", true},
		{"[::1]:7380", true}, {"[::1]", true},
		{"thaw.internal", true}, {"Thaw.Internal:7380", true}, {"10.0.0.5:7443", true}, {"[fd00::1]:7443", true},
		{"evil.example", false}, {"evil.example:7380", false}, {"127.0.0.1.evil.example", false},
		{"localhost.evil.example:7380", false}, {"10.0.0.5:80", false}, {"10.0.0.5", false},
		{"0.0.0.0:7380", false}, {"", false},
	} {
		h, rec := recordingHandler(opts)
		r := localRequest("GET", "/v1/info", "", "")
		r.Host = c.host
		if w := serveOne(h, r); c.ok {
			wantServed(t, "Host "+c.host, w, rec)
		} else {
			wantRefused(t, "Host "+c.host, w, rec, 403, codeForbidden, "Host")
		}
	}

	// Over the Unix socket the Host is whatever the client made up, and
	// no token is needed.
	h, rec := recordingHandler(Options{})
	r := localRequest("GET", "/v1/info", "", "")
	r.Host = "evil.example"
	r.Header.Del("Authorization")
	r = r.WithContext(daemon.WithCaller(r.Context(), daemon.Caller{Unix: true, UID: 1000}))
	wantServed(t, "Unix socket", serveOne(h, r), rec)
	if c := rec.reached()[0].caller; !c.Unix || c.UID != 1000 {
		t.Errorf("route saw caller %+v", c)
	}
}

// TestRulesOverRealTCP sends real requests through a TCP server: the Host
// header as the HTTP stack sets it (a DNS-rebinding page's name), and a
// chunked text/plain body (no Content-Length).
func TestRulesOverRealTCP(t *testing.T) {
	h, rec := recordingHandler(Options{Token: testToken})
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnContext = h.ConnContext
	srv.Start()
	defer srv.Close()
	send := func(host, ct string, body io.Reader) (int, string) {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/vms", body)
		if host != "" {
			req.Host = host
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", ct)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if st, b := send("rebound.evil.example:"+strings.Split(srv.URL, ":")[2], "application/json", strings.NewReader(`{}`)); st != 403 {
		t.Errorf("rebound Host: %d %s", st, b)
	}
	chunked := io.MultiReader(strings.NewReader(`{"function":`), strings.NewReader(`"x"}`)) // no length: sent chunked
	if st, b := send("", "text/plain", chunked); st != 415 {
		t.Errorf("chunked text/plain: %d %s", st, b)
	}
	if len(rec.reached()) != 0 {
		t.Fatalf("refused requests reached routes: %+v", rec.reached())
	}
	if st, b := send("", "application/json", strings.NewReader(`{"function":"x"}`)); st != 200 {
		t.Errorf("good request: %d %s", st, b)
	}
	if c := rec.reached(); len(c) != 1 || !c[0].hasCaller || c[0].caller.Unix {
		t.Errorf("TCP request's caller: %+v", c)
	}
}

func TestBodyTypes(t *testing.T) {
	for _, c := range []struct {
		method, target, ct, body string
		ok                       bool
	}{
		{"POST", "/v1/vms", "application/json", "{}", true},
		{"POST", "/v1/vms", "Application/JSON; charset=utf-8", "{}", true},
		{"POST", "/v1/vms", "", "{}", false},
		{"POST", "/v1/vms", "application/gzip", "{}", false}, // gzip only creates functions
		{"POST", "/v1/vms", "text/plain", "{}", false},
		{"POST", "/v1/vms", "application/json-seq", "{}", false},
		{"POST", "/v1/vms", "application/json;;", "{}", false}, // malformed
		{"POST", "/v1/functions", "application/gzip", "\x1f\x8b", true},
		{"POST", "/v1/functions", "application/x-gzip", "\x1f\x8b", true},
		{"POST", "/v1/functions", "application/octet-stream", "\x1f\x8b", false},
		{"POST", "/v1/vms/vm-0123456789ab/pause", "", "", true}, // no body, no type needed
		{"POST", "/v1/vms/vm-0123456789ab/pause", "text/plain", "x", false},
		{"GET", "/v1/info", "text/plain", "", true},
	} {
		h, rec := recordingHandler(Options{Token: testToken})
		what := c.method + " " + c.target + " " + c.ct
		if w := serveOne(h, localRequest(c.method, c.target, c.ct, c.body)); c.ok {
			wantServed(t, what, w, rec)
		} else {
			wantRefused(t, what, w, rec, 415, codeUnsupportedType, "application/json")
		}
	}
}

// BenchmarkAdmit measures the guard on an admitted TCP JSON request.
func BenchmarkAdmit(b *testing.B) {
	h := NewServices(noDaemon(), discard, Options{Token: testToken, AllowedOrigins: []string{"https://dash.example"}})
	r := localRequest("POST", "/v1/vms", "application/json", `{"function":"hello"}`)
	r.Header.Set("Origin", "https://dash.example")
	w := httptest.NewRecorder()
	for b.Loop() {
		if _, ok := h.admit(w, r, "POST /v1/vms"); !ok {
			b.Fatal("refused")
		}
	}
}
