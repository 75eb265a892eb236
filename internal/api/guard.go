package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"fmt"
	"mime"
	"net"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/triggers"
)

// Options are the API's protections, and its tracing. The zero value
// serves Unix-socket requests and refuses every TCP request (no token is
// configured).
type Options struct {
	// Token is the bearer token every TCP request must carry
	// (Authorization: Bearer TOKEN). Unix-socket requests need none: the
	// socket's permissions decide who may connect.
	Token string
	// AllowedHosts are Host header values accepted on TCP besides loopback
	// names and addresses. A value without a port matches any port.
	AllowedHosts []string
	// AllowedOrigins are web origins (scheme://host[:port]) whose browser
	// requests are served. A request with any other Origin is refused.
	AllowedOrigins []string
	// NodeName names this daemon among a cluster's nodes: answers carry
	// it in the Thaw-Node header, GET /v1/health and GET /v1/info in
	// their bodies. "": none.
	NodeName string
	// TracerProvider makes a span of every request (tracing.go), the
	// parent of the service's spans; nil: none. It is the daemon's
	// (daemon.Config.TracerProvider).
	TracerProvider trace.TracerProvider
	// ResultWriteIdle is how long writing each MiB of an invocation's
	// result may take (a caller that stopped reading) before the answer is
	// cut off; 0: 30 s.
	ResultWriteIdle time.Duration
	// Triggers serve the endpoints', asynchronous invocations' and
	// schedules' routes (triggers.go); nil: those answer 503.
	Triggers *triggers.Triggers
}

// Error codes of the requests the guard refuses.
const (
	codeUnauthenticated = "unauthenticated"        // 401
	codeForbidden       = "forbidden"              // 403
	codeUnsupportedType = "unsupported_media_type" // 415
	// codeUnavailable (health.go): 503 while the daemon starts.
)

// guardCodes are the statuses and codes admit answers (openapi_test
// checks the document against them).
var guardCodes = map[string]int{
	codeUnauthenticated: http.StatusUnauthorized,
	codeForbidden:       http.StatusForbidden,
	codeUnsupportedType: http.StatusUnsupportedMediaType,
	codeUnavailable:     http.StatusServiceUnavailable,
}

// AuthRealm is the realm of the 401 answers' WWW-Authenticate header.
const AuthRealm = "thaw"

// admit applies the API's protections before a request reaches its route
// (pattern is the route's, "" for unknown paths): Host and Origin against
// DNS rebinding and cross-site requests, the token over TCP, and JSON (or,
// to create a function, gzip) as the only body types, which no HTML form
// can send; and, while the daemon starts, nothing but GET /v1/health,
// which passes no other rule (load balancers and probes send neither a
// token nor this daemon's Host, and it tells nothing but the state). It
// returns the request carrying its caller, or false after answering.
func (h *Handler) admit(w http.ResponseWriter, r *http.Request, pattern string) (*http.Request, bool) {
	c, ok := daemon.CallerFrom(r.Context())
	if !ok {
		c = daemon.Caller{} // no connection context: not a Unix socket
		r = r.WithContext(daemon.WithCaller(r.Context(), c))
	}
	if pattern == healthPattern {
		return r, true
	}
	if !c.Unix && !h.hostAllowed(r.Host) {
		writeError(w, http.StatusForbidden, codeForbidden, fmt.Sprintf(
			"Host %q is neither a loopback name or address nor an allowed host (thawd --allowed-host)", r.Host))
		return r, false
	}
	if msg := h.originRefused(r); msg != "" {
		writeError(w, http.StatusForbidden, codeForbidden, msg)
		return r, false
	}
	if !c.Unix {
		if msg, wrong := h.tokenRefused(r); msg != "" {
			challenge := `Bearer realm="` + AuthRealm + `"`
			if wrong {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeError(w, http.StatusUnauthorized, codeUnauthenticated, msg)
			return r, false
		}
	}
	if msg := bodyTypeRefused(r, pattern); msg != "" {
		writeError(w, http.StatusUnsupportedMediaType, codeUnsupportedType, msg)
		return r, false
	}
	if h.state.get() == Starting {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "thawd is starting: try again shortly (GET /v1/health says when it serves)")
		return r, false
	}
	return r, true
}

// hostAllowed: loopback names and addresses with any port, or an allowed
// host (with its port if it names one).
func (h *Handler) hostAllowed(host string) bool {
	if host == "" {
		return false
	}
	name := host
	if hn, _, err := net.SplitHostPort(host); err == nil {
		name = hn
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if strings.EqualFold(name, "localhost") {
		return true
	}
	if ip := net.ParseIP(name); ip != nil && ip.IsLoopback() {
		return true
	}
	for _, a := range h.opts.AllowedHosts {
		a = strings.TrimSpace(a)
		if _, _, err := net.SplitHostPort(a); err == nil {
			if strings.EqualFold(a, host) {
				return true
			}
		} else if strings.EqualFold(strings.TrimSuffix(strings.TrimPrefix(a, "["), "]"), name) {
			return true
		}
	}
	return false
}

// originRefused refuses browser requests from web pages: any Origin that
// is not allowed, and requests a browser marks as cross-site or same-site
// (Sec-Fetch-Site) that carry no allowed Origin (GETs carry none).
func (h *Handler) originRefused(r *http.Request) string {
	origins := r.Header.Values("Origin")
	for _, o := range origins {
		if !h.originAllowed(o) {
			return fmt.Sprintf("requests from the web origin %q are refused (thawd --allowed-origin)", o)
		}
	}
	if site := r.Header.Get("Sec-Fetch-Site"); len(origins) == 0 && site != "" && site != "same-origin" && site != "none" {
		return fmt.Sprintf("a %s browser request without an allowed Origin is refused", site)
	}
	return ""
}

func (h *Handler) originAllowed(origin string) bool {
	for _, a := range h.opts.AllowedOrigins {
		if strings.EqualFold(strings.TrimSuffix(strings.TrimSpace(a), "/"), origin) {
			return true
		}
	}
	return false
}

// tokenRefused checks the bearer token in constant time; it says why a
// request is refused, or "", and whether a token was sent and is wrong.
func (h *Handler) tokenRefused(r *http.Request) (msg string, wrong bool) {
	if h.opts.Token == "" {
		return "this daemon serves no TCP clients: it has no API token configured", false
	}
	auth := r.Header.Get("Authorization")
	if auth == "" {
		return "an API token is required over TCP: send Authorization: Bearer TOKEN", false
	}
	scheme, tok, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "the Authorization header must be Bearer TOKEN", false
	}
	if !tokenMatches(strings.TrimSpace(tok), h.opts.Token) {
		return "the API token is wrong", true
	}
	return "", false
}

// tokenMatches compares the SHA-256 digests of both tokens in constant
// time, so neither the contents nor the length of the token leak through
// timing.
func tokenMatches(got, want string) bool {
	g, w := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
	return subtle.ConstantTimeCompare(g[:], w[:]) == 1
}

// archiveRoutes are the routes that also take a tar.gz body (a function's
// code).
var archiveRoutes = map[string]bool{"POST /v1/functions": true, "POST /v1/functions/{name}/deploy": true}

// bodyTypeRefused: a request with a body must send application/json
// (application/gzip or application/x-gzip for a function's archive).
func bodyTypeRefused(r *http.Request, pattern string) string {
	if r.ContentLength == 0 {
		return ""
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil {
		switch mt = strings.ToLower(mt); {
		case mt == "application/json":
			return ""
		case archiveRoutes[pattern] && (mt == "application/gzip" || mt == "application/x-gzip"):
			return ""
		}
	}
	want := "application/json"
	if archiveRoutes[pattern] {
		want += " (or application/gzip for an archive)"
	}
	if ct == "" {
		return "a request body needs Content-Type " + want
	}
	return fmt.Sprintf("Content-Type %q is not accepted: send %s", ct, want)
}

// ConnContext is the http.Server's ConnContext: it records who is on each
// connection, once per connection, for every request on it. On a Unix
// socket that is the peer's uid, gid and pid from the kernel
// (SO_PEERCRED); a Unix connection whose credentials cannot be read is
// closed. Anything else is a TCP caller.
func (h *Handler) ConnContext(ctx context.Context, c net.Conn) context.Context {
	nc := c
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	uc, ok := nc.(*net.UnixConn)
	if !ok {
		return daemon.WithCaller(ctx, daemon.Caller{})
	}
	cred, err := peerCred(uc)
	if err != nil {
		h.log.Warn("refused a Unix-socket connection", "err", err)
		_ = c.Close()
		return ctx
	}
	return daemon.WithCaller(ctx, daemon.Caller{Unix: true, UID: cred.Uid, GID: cred.Gid, PID: cred.Pid})
}

func peerCred(uc *net.UnixConn) (*unix.Ucred, error) {
	raw, err := uc.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, fmt.Errorf("peer credentials: %w", err)
	}
	if cerr != nil {
		return nil, fmt.Errorf("peer credentials: SO_PEERCRED: %w", cerr)
	}
	return cred, nil
}
