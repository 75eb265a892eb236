// Package client is the typed Go client for thawd's REST API. The CLI talks
// to the daemon only through it. HTTP statuses come back as typed errors
// (ErrNotFound, ErrConflict, ...) wrapped in *APIError, which keeps the
// daemon's message. Over http(s) the client sends the daemon's API token;
// over the Unix socket it never does (see NewFromEnv and WithToken).
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/thaw-dev/thaw/internal/codearchive"
	"github.com/thaw-dev/thaw/wire"
)

// Errors by HTTP status.
var (
	ErrInvalid              = errors.New("invalid request")        // 400
	ErrUnauthorized         = errors.New("unauthorized")           // 401: no token, or a wrong one
	ErrForbidden            = errors.New("forbidden")              // 403
	ErrNotFound             = errors.New("not found")              // 404
	ErrConflict             = errors.New("conflict")               // 409
	ErrUnsupportedMediaType = errors.New("unsupported media type") // 415
	ErrSnapshotUnusable     = errors.New("snapshot unusable")      // 422
	ErrTooMany              = errors.New("too many requests")      // 429
	ErrVMFailed             = errors.New("vm failed")              // 502
	ErrUnavailable          = errors.New("unavailable")            // 503: starting, draining, or the snapshot registry did not answer
	ErrTimeout              = errors.New("timeout")                // 504
	ErrServer               = errors.New("server error")           // other statuses
	ErrUnreachable          = errors.New("daemon is unreachable")  // no answer
)

// APIError is an error answer from the daemon.
type APIError struct {
	Status  int
	Code    string
	Message string
	// RequestID is the daemon's id of the request (the error body's
	// request_id, else its X-Request-Id header; for an operation's error,
	// the request that started it): its log lines about the request name it.
	RequestID string
	kind      error
}

func (e *APIError) Error() string { return e.Message }

// Unwrap returns the typed error for the status.
func (e *APIError) Unwrap() error { return e.kind }

func kindOf(status int) error {
	switch status {
	case 400:
		return ErrInvalid
	case 401:
		return ErrUnauthorized
	case 403:
		return ErrForbidden
	case 404:
		return ErrNotFound
	case 409:
		return ErrConflict
	case 415:
		return ErrUnsupportedMediaType
	case 422:
		return ErrSnapshotUnusable
	case 429:
		return ErrTooMany
	case 502:
		return ErrVMFailed
	case 503:
		return ErrUnavailable
	case 504:
		return ErrTimeout
	}
	return ErrServer
}

// Client talks to one daemon.
type Client struct {
	base  string
	http  *http.Client
	wrap  func(http.RoundTripper) http.RoundTripper
	token string // sent as Authorization: Bearer over http(s) only
	unix  bool
	err   error         // a configuration that must not be used (returned by every call)
	poll  time.Duration // WaitOperation's interval
}

// DefaultURL is where thawd listens by default: its Unix socket.
const DefaultURL = "unix:/run/thaw/thawd.sock"

// DefaultTokenFile is the token thawd generates in its default data
// directory; NewFromEnv reads it when it is readable and nothing else
// names a token.
const DefaultTokenFile = "/var/lib/thaw/token"

// Option configures a Client.
type Option func(*Client)

// WithToken sets the API token sent over http(s) (never over a Unix socket).
func WithToken(token string) Option { return func(c *Client) { c.token = strings.TrimSpace(token) } }

// WithRootCAs makes https trust only the certificates in pool (a private
// CA), instead of the system's.
func WithRootCAs(pool *x509.CertPool) Option {
	return func(c *Client) {
		if t, ok := c.http.Transport.(*http.Transport); ok {
			t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
	}
}

// WithRoundTripper wraps the client's transport (applied after the other
// options): tests check every answer against the API's document this way.
func WithRoundTripper(wrap func(http.RoundTripper) http.RoundTripper) Option {
	return func(c *Client) { c.wrap = wrap }
}

// New returns a client for a daemon at base: an http(s):// URL, or
// unix:PATH for a Unix socket.
func New(base string, opts ...Option) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	c := &Client{base: strings.TrimRight(base, "/"), http: &http.Client{Transport: tr}, poll: 500 * time.Millisecond}
	if path, ok := strings.CutPrefix(base, "unix:"); ok {
		c.base, c.unix = "http://thawd", true
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
	}
	for _, o := range opts {
		o(c)
	}
	if c.wrap != nil {
		c.http.Transport = c.wrap(c.http.Transport)
	}
	if c.unix {
		c.token = ""
	} else if c.token != "" {
		c.err = checkTokenTransport(c.base)
	}
	return c
}

// checkTokenTransport refuses to send the token in clear text off this
// host: plain http only to a loopback address.
func checkTokenTransport(base string) error {
	u, err := url.Parse(base)
	if err != nil {
		return fmt.Errorf("daemon URL %q: %w", base, err)
	}
	if u.Scheme == "https" {
		return nil
	}
	host := u.Hostname()
	if ip := net.ParseIP(host); strings.EqualFold(host, "localhost") || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("refusing to send the API token over plain http to %s: use https:// (thawd --tls-cert) or the Unix socket", u.Host)
}

// NewFromEnv is New configured from the environment, as the CLI uses it.
// For http(s) URLs the token is $THAW_TOKEN, else the contents of the
// file $THAW_TOKEN_FILE, else of DefaultTokenFile if it is readable;
// $THAW_CACERT names a PEM file of the CA (or certificate) https trusts
// instead of the system's. Nothing is read for a Unix socket.
func NewFromEnv(base string) (*Client, error) {
	if strings.HasPrefix(base, "unix:") {
		return New(base), nil
	}
	var opts []Option
	tok, err := tokenFromEnv()
	if err != nil {
		return nil, err
	}
	if tok != "" {
		opts = append(opts, WithToken(tok))
	}
	if ca := os.Getenv("THAW_CACERT"); ca != "" {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("THAW_CACERT: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("THAW_CACERT %s: no PEM certificate in it", ca)
		}
		opts = append(opts, WithRootCAs(pool))
	}
	return New(base, opts...), nil
}

func tokenFromEnv() (string, error) {
	if tok := strings.TrimSpace(os.Getenv("THAW_TOKEN")); tok != "" {
		return tok, nil
	}
	if path := os.Getenv("THAW_TOKEN_FILE"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("THAW_TOKEN_FILE: %w", err)
		}
		if tok := strings.TrimSpace(string(b)); tok != "" {
			return tok, nil
		}
		return "", fmt.Errorf("THAW_TOKEN_FILE %s is empty", path)
	}
	b, err := os.ReadFile(DefaultTokenFile)
	if err != nil {
		return "", nil // not readable by this user: no token (a 401 will say where it comes from)
	}
	return strings.TrimSpace(string(b)), nil
}

// HasToken reports whether requests carry an API token.
func (c *Client) HasToken() bool { return c.token != "" }

// send makes one request and reads the whole answer.
func (c *Client) send(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, []byte, error) {
	if c.err != nil {
		return nil, nil, c.err
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" && !c.unix {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	for k, v := range extraHeaders(ctx) { // triggers.go: Idempotency-Key
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%w at %s: %w", ErrUnreachable, c.base, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, fmt.Errorf("read answer: %w", err)
	}
	return resp, b, nil
}

// apiError is the error of an answer with status >= 300.
func apiError(resp *http.Response, b []byte) *APIError {
	var eb struct {
		Error struct {
			Code      string `json:"code"`
			Message   string `json:"message"`
			RequestID string `json:"request_id"`
		} `json:"error"`
	}
	msg := strings.TrimSpace(string(b))
	if json.Unmarshal(b, &eb) == nil && eb.Error.Message != "" {
		msg = eb.Error.Message
	}
	rid := eb.Error.RequestID
	if rid == "" {
		rid = resp.Header.Get("X-Request-Id")
	}
	return &APIError{Status: resp.StatusCode, Code: eb.Error.Code, Message: msg, RequestID: rid, kind: kindOf(resp.StatusCode)}
}

func (c *Client) do(ctx context.Context, method, path string, body io.Reader, contentType string, out any) error {
	resp, b, err := c.send(ctx, method, path, body, contentType)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return apiError(resp, b)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		return nil
	}
	if raw, ok := out.(*json.RawMessage); ok {
		*raw = append((*raw)[:0], b...)
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("decode answer: %w", err)
	}
	return nil
}

func (c *Client) doJSON(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	ct := ""
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body, ct = bytes.NewReader(b), "application/json"
	}
	return c.do(ctx, method, path, body, ct, out)
}

// call sends in (nil: no body) as JSON and decodes the answer as a T.
func call[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	var out T
	return &out, c.doJSON(ctx, method, path, in, &out)
}

type items[T any] struct {
	Items []T    `json:"items"`
	Next  string `json:"next"`
}

// all fetches every page of the collection at path (with its query),
// following the cursors, up to max items (0: all).
func all[T any](ctx context.Context, c *Client, path string, q url.Values, max int) ([]T, error) {
	var out []T
	for {
		if max > 0 {
			q.Set("limit", strconv.Itoa(min(max-len(out), 1000)))
		}
		var page items[T]
		target := path
		if len(q) > 0 {
			target += "?" + q.Encode()
		}
		if err := c.doJSON(ctx, "GET", target, nil, &page); err != nil {
			return out, err
		}
		out = append(out, page.Items...)
		if page.Next == "" || (max > 0 && len(out) >= max) {
			return out, nil
		}
		q.Set("after", page.Next)
	}
}

// Info describes the daemon.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	return call[Info](ctx, c, "GET", "/v1/info", nil)
}

// Health asks whether the daemon serves (no token needed). A daemon that
// starts or drains answers its Health with an *APIError wrapping
// ErrUnavailable.
func (c *Client) Health(ctx context.Context) (*Health, error) {
	resp, b, err := c.send(ctx, "GET", "/v1/health", nil, "")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusServiceUnavailable {
		return nil, apiError(resp, b)
	}
	var h Health
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("decode answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return &h, &APIError{Status: resp.StatusCode, Code: "unavailable", Message: "thawd is " + h.Status, kind: ErrUnavailable}
	}
	return &h, nil
}

// OpenAPI returns the daemon's OpenAPI document.
func (c *Client) OpenAPI(ctx context.Context) (json.RawMessage, error) {
	var raw json.RawMessage
	return raw, c.do(ctx, "GET", "/v1/openapi.json", nil, "", &raw)
}

// CreateFunctionFromDir uploads a local function directory as a tar.gz, so
// it works against a daemon on another host too.
func (c *Client) CreateFunctionFromDir(ctx context.Context, name, dir string, memoryMiB, vcpus int, opts ...FunctionOption) (*Function, error) {
	archive, err := TarGz(dir)
	if err != nil {
		return nil, err
	}
	var o functionOptions
	for _, opt := range opts {
		opt(&o)
	}
	q := url.Values{"name": {name}}
	if o.network.Egress != "" {
		q.Set("egress", o.network.Egress)
	}
	for _, s := range o.network.Services {
		q.Add("allow", s)
	}
	if memoryMiB > 0 {
		q.Set("memory_mib", strconv.Itoa(memoryMiB))
	}
	if vcpus > 0 {
		q.Set("vcpus", strconv.Itoa(vcpus))
	}
	if o.maxConcurrency > 0 {
		q.Set("max_concurrency", strconv.Itoa(o.maxConcurrency))
	}
	if o.keepAliveS != 0 {
		q.Set("keep_alive_s", strconv.Itoa(o.keepAliveS))
	}
	if o.vmmPool != 0 {
		q.Set("vmm_pool", strconv.Itoa(o.vmmPool))
	}
	if o.vmmPoolTTLS != 0 {
		q.Set("vmm_pool_ttl_s", strconv.Itoa(o.vmmPoolTTLS))
	}
	o.configQuery(q)
	o.restoreQuery(q)
	var f Function
	return &f, c.do(ctx, "POST", "/v1/functions?"+q.Encode(), bytes.NewReader(archive), "application/gzip", &f)
}

// CreateFunctionFromServerDir creates a function from a directory on the
// daemon's host.
func (c *Client) CreateFunctionFromServerDir(ctx context.Context, name, dir string, memoryMiB, vcpus int, opts ...FunctionOption) (*Function, error) {
	var o functionOptions
	for _, opt := range opts {
		opt(&o)
	}
	in := wire.CreateFunctionRequest{Name: name, Directory: dir, MemoryMiB: memoryMiB, VCPUs: vcpus,
		MaxConcurrency: o.maxConcurrency, KeepAliveS: o.keepAliveS, VMMPool: o.vmmPool, VMMPoolTTLS: o.vmmPoolTTLS}
	if o.network.Egress != "" || len(o.network.Services) > 0 {
		in.Network = &o.network
	}
	if len(o.env) > 0 {
		in.Env = o.env
	}
	if len(o.secrets) > 0 {
		in.Secrets = o.secrets
	}
	o.restoreRequest(&in)
	return call[Function](ctx, c, "POST", "/v1/functions", in)
}

// FunctionOption sets an optional property of a new function.
type FunctionOption func(*functionOptions)

type functionOptions struct {
	network        Network
	maxConcurrency int
	keepAliveS     int
	vmmPool        int
	vmmPoolTTLS    int
	env, secrets   map[string]string
	restore        RestoreSettings // strategy and refresh settings (adaptive.go)
}

// WithVMMPool sets how many VMMs the VMM pool starts ahead of restores per
// snapshot and strategy of the function (-1: none), and how long one
// waits unused (seconds; 0: the daemon's default).
func WithVMMPool(size, ttlSeconds int) FunctionOption {
	return func(o *functionOptions) { o.vmmPool, o.vmmPoolTTLS = size, ttlSeconds }
}

// WithKeepAlive sets how long the function's VMs are kept idle after a
// cold invocation for its next ones, in seconds; -1: never.
func WithKeepAlive(seconds int) FunctionOption {
	return func(o *functionOptions) { o.keepAliveS = seconds }
}

// WithMaxConcurrency bounds the function's live VMs; more starts wait for
// room, then get 429.
func WithMaxConcurrency(n int) FunctionOption {
	return func(o *functionOptions) { o.maxConcurrency = n }
}

// WithServices lets the function's guests reach these host:port services
// (egress "services").
func WithServices(services ...string) FunctionOption {
	return func(o *functionOptions) { o.network.Services = append(o.network.Services, services...) }
}

// WithEgress sets the function's egress ("none", "services" or "full").
func WithEgress(egress string) FunctionOption {
	return func(o *functionOptions) { o.network.Egress = egress }
}

// TarGz packs a directory's regular files and directories (not Python's
// __pycache__ nor .git) as CreateFunction sends them; anything else in it
// is an error. The same code packs to the same bytes.
func TarGz(dir string) ([]byte, error) { return codearchive.Pack(dir) }

// ListFunctions lists functions.
func (c *Client) ListFunctions(ctx context.Context) ([]Function, error) {
	return all[Function](ctx, c, "/v1/functions", url.Values{}, 0)
}

// GetFunction gets one function.
func (c *Client) GetFunction(ctx context.Context, name string) (*Function, error) {
	return call[Function](ctx, c, "GET", "/v1/functions/"+url.PathEscape(name), nil)
}

// DeleteFunction deletes a function nothing uses (DeleteFunctionWith
// without Cascade).
func (c *Client) DeleteFunction(ctx context.Context, name string) error {
	return c.doJSON(ctx, "DELETE", "/v1/functions/"+url.PathEscape(name), nil, nil)
}

// BootVM boots a function's VM and waits until it is ready.
func (c *Client) BootVM(ctx context.Context, function string) (*VM, error) {
	return call[VM](ctx, c, "POST", "/v1/vms", map[string]string{"function": function})
}

// RestoreVM restores a VM from a snapshot and keeps it running.
func (c *Client) RestoreVM(ctx context.Context, snapshot, strategy string) (*VM, error) {
	in := map[string]string{"snapshot": snapshot}
	if strategy != "" {
		in["strategy"] = strategy
	}
	return call[VM](ctx, c, "POST", "/v1/vms", in)
}

// ListVMs lists VMs.
func (c *Client) ListVMs(ctx context.Context) ([]VM, error) {
	return all[VM](ctx, c, "/v1/vms", url.Values{}, 0)
}

// GetVM gets one VM.
func (c *Client) GetVM(ctx context.Context, id string) (*VM, error) {
	return call[VM](ctx, c, "GET", "/v1/vms/"+url.PathEscape(id), nil)
}

// DeleteVM stops and forgets a VM, once what runs on it has finished
// (DeleteVMWith without Force).
func (c *Client) DeleteVM(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/vms/"+url.PathEscape(id), nil, nil)
}

// PauseVM pauses a running VM.
func (c *Client) PauseVM(ctx context.Context, id string) (*VM, error) {
	return call[VM](ctx, c, "POST", "/v1/vms/"+url.PathEscape(id)+"/pause", nil)
}

// ResumeVM resumes a paused VM.
func (c *Client) ResumeVM(ctx context.Context, id string) (*VM, error) {
	return call[VM](ctx, c, "POST", "/v1/vms/"+url.PathEscape(id)+"/resume", nil)
}

// InvokeOptions are the optional parts of an invocation.
type InvokeOptions struct {
	Timeout  time.Duration
	Strategy string // cold invocations
	Variant  string // cold invocations: a variant of the strategy (faasnap's techniques off)
	Snapshot string // InvokeFunction: a specific snapshot instead of the newest
	// EvictCache evicts the snapshot's files from the host page cache
	// before a cold invocation.
	EvictCache bool
	// Strict makes a cold invocation fail (409) instead of running as
	// vanilla when its strategy cannot restore the snapshot.
	Strict bool
	// Logs asks for what the invocation wrote in its answer
	// (Invocation.Logs).
	Logs bool
}

func invokeBody(event json.RawMessage, o InvokeOptions) wire.InvokeRequest {
	return wire.InvokeRequest{Event: event, TimeoutMS: o.Timeout.Milliseconds(), Strategy: o.Strategy, Variant: o.Variant,
		Snapshot: o.Snapshot, EvictCache: o.EvictCache, Strict: o.Strict, Logs: o.Logs}
}

// InvokeVM invokes the function on a running VM (warm).
func (c *Client) InvokeVM(ctx context.Context, id string, event json.RawMessage, o InvokeOptions) (*Invocation, error) {
	return call[Invocation](ctx, c, "POST", "/v1/vms/"+url.PathEscape(id)+"/invoke", invokeBody(event, o))
}

// InvokeSnapshot restores a VM from a snapshot, invokes and tears it down.
func (c *Client) InvokeSnapshot(ctx context.Context, id string, event json.RawMessage, o InvokeOptions) (*Invocation, error) {
	return call[Invocation](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/invoke", invokeBody(event, o))
}

// InvokeFunction is a cold invocation from the function's newest snapshot
// (or o.Snapshot).
func (c *Client) InvokeFunction(ctx context.Context, name string, event json.RawMessage, o InvokeOptions) (*Invocation, error) {
	return call[Invocation](ctx, c, "POST", "/v1/functions/"+url.PathEscape(name)+"/invoke", invokeBody(event, o))
}

// ListInvocations lists recent invocations, newest first.
func (c *Client) ListInvocations(ctx context.Context, function string, limit int) ([]InvocationRecord, error) {
	q := url.Values{}
	if function != "" {
		q.Set("function", function)
	}
	if limit <= 0 {
		limit = 100
	}
	return all[InvocationRecord](ctx, c, "/v1/invocations", q, limit)
}

// CreateSnapshot snapshots a booted VM.
func (c *Client) CreateSnapshot(ctx context.Context, vm string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, "POST", "/v1/snapshots", map[string]string{"vm": vm})
}

// ListSnapshots lists snapshots, of one function if function is set.
func (c *Client) ListSnapshots(ctx context.Context, function string) ([]Snapshot, error) {
	q := url.Values{}
	if function != "" {
		q.Set("function", function)
	}
	return all[Snapshot](ctx, c, "/v1/snapshots", q, 0)
}

// PinSnapshot pins a snapshot: garbage collection keeps it.
func (c *Client) PinSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, "PUT", "/v1/snapshots/"+url.PathEscape(id)+"/pin", nil)
}

// UnpinSnapshot unpins a snapshot.
func (c *Client) UnpinSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(id)+"/pin", nil, nil)
}

// GetSnapshot gets one snapshot.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, "GET", "/v1/snapshots/"+url.PathEscape(id), nil)
}

// EvictSnapshot drops a snapshot's files and artifacts from the daemon
// host's page cache.
func (c *Client) EvictSnapshot(ctx context.Context, id string) (*SnapshotMemory, error) {
	return call[SnapshotMemory](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/evict", nil)
}

// VerifySnapshot fully re-checks a snapshot's files and inputs.
func (c *Client) VerifySnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/verify", nil)
}

// StoreSnapshot places a snapshot's memory in the memory store (premap).
func (c *Client) StoreSnapshot(ctx context.Context, id string) (*StoreEntry, error) {
	return call[StoreEntry](ctx, c, "PUT", "/v1/snapshots/"+url.PathEscape(id)+"/store", nil)
}

// UnstoreSnapshot removes a snapshot's copy from the memory store.
func (c *Client) UnstoreSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(id)+"/store", nil, nil)
}

// Store describes the memory store.
func (c *Client) Store(ctx context.Context) (*StoreInfo, error) {
	return call[StoreInfo](ctx, c, "GET", "/v1/store", nil)
}

// SnapshotMemory measures the host memory a snapshot's files hold.
func (c *Client) SnapshotMemory(ctx context.Context, id string) (*SnapshotMemory, error) {
	return call[SnapshotMemory](ctx, c, "GET", "/v1/snapshots/"+url.PathEscape(id)+"/memory", nil)
}

// VMMemory measures a running VM's process memory.
func (c *Client) VMMemory(ctx context.Context, id string) (*VMMemory, error) {
	return call[VMMemory](ctx, c, "GET", "/v1/vms/"+url.PathEscape(id)+"/memory", nil)
}

// CopySnapshot duplicates a snapshot (files and strategy artifacts) under
// a new id that shares no file with the original.
func (c *Client) CopySnapshot(ctx context.Context, id string) (*Snapshot, error) {
	return call[Snapshot](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/copy", nil)
}

// DeleteSnapshot deletes a snapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(id), nil, nil)
}

// PrepareOptions tune Prepare.
type PrepareOptions struct {
	GroupSize int // FaaSnap working-set group size, pages (0: 1024)
	MergeGap  int // FaaSnap merge threshold, pages (0: 32)
	Timeout   time.Duration
	// FaaSnapVariants also builds FaaSnap's technique-off artifacts.
	FaaSnapVariants bool
}

// Prepare boots the function, takes a clean snapshot, records the working
// set with recordEvent, takes the warm snapshot and builds every strategy's
// artifacts. Later cold invocations restore the warm snapshot.
func (c *Client) Prepare(ctx context.Context, function string, recordEvent json.RawMessage, o PrepareOptions) (*PrepareResult, error) {
	return call[PrepareResult](ctx, c, "POST", "/v1/functions/"+url.PathEscape(function)+"/prepare", prepareBody(recordEvent, o))
}

func prepareBody(recordEvent json.RawMessage, o PrepareOptions) wire.PrepareRequest {
	return wire.PrepareRequest{RecordEvent: recordEvent, GroupSize: o.GroupSize, MergeGap: o.MergeGap,
		TimeoutMS: o.Timeout.Milliseconds(), FaaSnapVariants: o.FaaSnapVariants}
}

// PushSnapshot uploads a snapshot to the daemon's snapshot registry.
func (c *Client) PushSnapshot(ctx context.Context, id string) (*PushResult, error) {
	return call[PushResult](ctx, c, "POST", "/v1/snapshots/"+url.PathEscape(id)+"/push", nil)
}

// ListRegistrySnapshots lists the snapshots in the daemon's registry,
// oldest first.
func (c *Client) ListRegistrySnapshots(ctx context.Context) ([]RegistrySnapshot, error) {
	return all[RegistrySnapshot](ctx, c, "/v1/registry/snapshots", url.Values{}, 0)
}

// DeleteRegistrySnapshot removes a snapshot from the registry; its chunks
// go at the next collection (CollectRegistry).
func (c *Client) DeleteRegistrySnapshot(ctx context.Context, id string) error {
	return c.doJSON(ctx, "DELETE", "/v1/registry/snapshots/"+url.PathEscape(id), nil, nil)
}

// CollectRegistry deletes the registry's objects no snapshot or function
// names (older than the grace).
func (c *Client) CollectRegistry(ctx context.Context, req GCRequest) (*GCResult, error) {
	return call[GCResult](ctx, c, "POST", "/v1/registry/gc", req)
}

// PullSnapshot fetches a snapshot (req.Snapshot, or the newest of
// req.Function) from the daemon's snapshot registry.
func (c *Client) PullSnapshot(ctx context.Context, req PullRequest) (*PullResult, error) {
	return call[PullResult](ctx, c, "POST", "/v1/snapshots/pull", req)
}
