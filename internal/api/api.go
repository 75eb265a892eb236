// Package api is thaw's REST API under /v1. It decodes requests, calls the
// daemon's service layer and encodes answers; this is the only place where
// errors become HTTP status codes. openapi.json beside this file documents
// every route and is served at /v1/openapi.json.
package api

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/httpreq"
	"github.com/thaw-dev/thaw/internal/triggers"
	"github.com/thaw-dev/thaw/internal/vmnet"
	"github.com/thaw-dev/thaw/wire"
	"go.opentelemetry.io/otel/trace"
)

//go:embed openapi.json
var OpenAPI []byte

// Body limits. Oversized bodies are refused with 400.
const (
	maxControlBody = 1 << 20
	maxInvokeBody  = daemon.MaxEventBytes + 4096
	maxArchiveBody = daemon.MaxCodeBytes
)

// vmBody is a VM's body outside a restore's answer.
func vmBody(v *catalog.VM) *wire.VM { return daemon.VMBody(v, nil) }

// Handler serves the API.
type Handler struct {
	svc    Services
	log    *slog.Logger
	mux    *http.ServeMux
	opts   Options
	tracer trace.Tracer // request spans; nil: none
	state  state        // Serving unless SetState says otherwise
}

// Route is one documented operation.
type Route struct{ Method, Pattern string }

// New builds the handler and its routes over one daemon that serves every
// family (nil: none), protected as opts says.
func New(d *daemon.Service, log *slog.Logger, opts Options) *Handler {
	return NewServices(ServicesOf(d), log, opts)
}

// NewServices builds the handler and its routes over the families in svc:
// a nil family's routes are not served.
func NewServices(svc Services, log *slog.Logger, opts Options) *Handler {
	h := &Handler{svc: svc, log: log, mux: http.NewServeMux(), opts: opts}
	if opts.TracerProvider != nil {
		h.tracer = opts.TracerProvider.Tracer(TracerName)
	}
	for _, r := range h.routes() {
		h.mux.HandleFunc(r.Method+" "+r.Pattern, r.fn)
	}
	return h
}

type route struct {
	Method, Pattern string
	fn              http.HandlerFunc
}

func (h *Handler) routes() []route {
	rs := []route{
		{"GET", "/v1/openapi.json", h.openapi},
		{"GET", "/v1/health", h.health},
	}
	for _, f := range []struct {
		served bool
		routes func() []route
	}{
		{h.svc.Host != nil, h.hostRoutes},
		{h.svc.Functions != nil, h.functionRoutes},
		{h.svc.Functions != nil, h.adaptiveRoutes},
		{h.svc.Versions != nil, h.versionRoutes},
		{h.svc.Invocations != nil, h.invocationRoutes},
		{h.svc.Invocations != nil, h.logRoutes},
		{h.svc.VMs != nil, h.vmRoutes},
		{h.svc.Snapshots != nil, h.snapshotRoutes},
		{h.svc.Registry != nil, h.registryRoutes},
		{h.svc.Operations != nil, h.operationRoutes},
		{h.svc.Secrets != nil, h.secretRoutes},
		{true, h.triggerRoutes},
	} {
		if f.served {
			rs = append(rs, f.routes()...)
		}
	}
	return rs
}

// hostRoutes serve what the daemon says of itself.
func (h *Handler) hostRoutes() []route {
	return []route{
		{"GET", "/metrics", h.metrics},
		{"GET", "/v1/info", h.info},
	}
}

// functionRoutes serve functions' records.
func (h *Handler) functionRoutes() []route {
	return []route{
		{"GET", "/v1/functions", list(h, func(ctx context.Context, _ *http.Request) ([]*catalog.Function, error) {
			return h.svc.ListFunctions(ctx)
		}, func(f *catalog.Function) string { return f.Name }, daemon.FunctionBody)},
		{"POST", "/v1/functions", h.createFunction},
		{"GET", "/v1/functions/{name}", h.getFunction},
		{"DELETE", "/v1/functions/{name}", h.deleteFunction},
	}
}

// invocationRoutes serve invocations: cold (a function's, a snapshot's)
// and on a live VM, and their history.
func (h *Handler) invocationRoutes() []route {
	return []route{
		{"POST", "/v1/functions/{name}/invoke", h.invokeFunction}, // triggers.go: ?async=true queues
		{"POST", "/v1/vms/{id}/invoke", readThen(h, readInvokeVM, h.invokeVM)},
		{"POST", "/v1/snapshots/{id}/invoke", readThen(h, readInvokeSnapshot, h.invokeCold)},
		{"GET", "/v1/invocations", h.listInvocations},
	}
}

// vmRoutes serve live VMs.
func (h *Handler) vmRoutes() []route {
	return []route{
		{"GET", "/v1/vms", list(h, func(ctx context.Context, _ *http.Request) ([]*catalog.VM, error) { return h.svc.ListVMs(ctx) },
			func(v *catalog.VM) string { return createdKey(v.CreatedAt, v.ID) }, vmBody)},
		{"POST", "/v1/vms", readThen(h, readWaiting(readCreateVM), h.createVM)},
		{"GET", "/v1/vms/{id}", h.getVM},
		{"DELETE", "/v1/vms/{id}", h.deleteVM},
		{"POST", "/v1/vms/{id}/pause", one(h, "id", http.StatusOK, h.svc.PauseVM, vmBody)},
		{"POST", "/v1/vms/{id}/resume", one(h, "id", http.StatusOK, h.svc.ResumeVM, vmBody)},
		{"GET", "/v1/vms/{id}/memory", one(h, "id", http.StatusOK, h.svc.VMMemory, same)},
	}
}

// snapshotRoutes serve snapshots, their preparation and the memory store.
func (h *Handler) snapshotRoutes() []route {
	return []route{
		{"POST", "/v1/functions/{name}/prepare", readThen(h, readWaiting(readPrepare), startOrServe(h, h.svc.StartPrepare, h.svc.Prepare, http.StatusCreated))},
		{"GET", "/v1/snapshots", list(h, func(ctx context.Context, r *http.Request) ([]*catalog.Snapshot, error) {
			return h.svc.ListSnapshots(ctx, r.URL.Query().Get("function"))
		}, func(s *catalog.Snapshot) string { return createdKey(s.CreatedAt, s.ID) }, daemon.SnapshotBody)},
		{"POST", "/v1/snapshots", readThen(h, readCreateSnapshot, h.createSnapshot)},
		{"GET", "/v1/snapshots/{id}", one(h, "id", http.StatusOK, h.svc.GetSnapshot, daemon.SnapshotBody)},
		{"DELETE", "/v1/snapshots/{id}", done(h, "id", h.svc.DeleteSnapshot)},
		{"POST", "/v1/snapshots/{id}/verify", one(h, "id", http.StatusOK, h.svc.CheckSnapshot, daemon.SnapshotBody)},
		{"POST", "/v1/snapshots/{id}/evict", h.evictSnapshot},
		{"PUT", "/v1/snapshots/{id}/store", h.storeSnapshot},
		{"DELETE", "/v1/snapshots/{id}/store", done(h, "id", h.svc.UnstoreSnapshot)},
		{"PUT", "/v1/snapshots/{id}/pin", one(h, "id", http.StatusOK, func(ctx context.Context, id string) (*catalog.Snapshot, error) {
			return h.svc.PinSnapshot(ctx, id, true)
		}, daemon.SnapshotBody)},
		{"DELETE", "/v1/snapshots/{id}/pin", done(h, "id", func(ctx context.Context, id string) error {
			_, err := h.svc.PinSnapshot(ctx, id, false)
			return err
		})},
		{"GET", "/v1/snapshots/{id}/memory", h.snapshotMemory},
		{"GET", "/v1/store", one(h, "", http.StatusOK, func(ctx context.Context, _ string) (*daemon.StoreInfo, error) { return h.svc.StoreInfo(ctx) }, same)},
		{"POST", "/v1/snapshots/{id}/copy", h.copySnapshot},
	}
}

// registryRoutes serve the snapshot registry.
func (h *Handler) registryRoutes() []route {
	return []route{
		{"POST", "/v1/snapshots/{id}/push", h.pushSnapshot},
		{"POST", "/v1/snapshots/pull", readThen(h, readWaiting(readSmallBody[wire.PullRequest]), startOrServe(h, h.svc.StartPull, h.svc.PullSnapshot, http.StatusCreated))},
		{"GET", "/v1/registry/snapshots", list(h, func(ctx context.Context, _ *http.Request) ([]wire.RegistrySnapshot, error) {
			return h.svc.ListRegistrySnapshots(ctx)
		}, func(s wire.RegistrySnapshot) string { return createdKey(s.CreatedAt, s.ID) }, same)},
		{"DELETE", "/v1/registry/snapshots/{id}", done(h, "id", h.svc.DeleteRegistrySnapshot)},
		{"POST", "/v1/registry/gc", readThen(h, readWaiting(readSmallBody[wire.GCRequest]), startOrServe(h, h.svc.StartGC, h.svc.CollectRegistry, http.StatusOK))},
	}
}

// operationRoutes serve the asynchronous operations.
func (h *Handler) operationRoutes() []route {
	return []route{
		{"GET", "/v1/operations", list(h, func(ctx context.Context, _ *http.Request) ([]*daemon.Operation, error) {
			return h.svc.ListOperations(ctx)
		},
			func(o *daemon.Operation) string { return createdKey(o.CreatedAt, o.ID) }, operationBody)},
		{"GET", "/v1/operations/{id}", one(h, "id", http.StatusOK, h.svc.Operation, operationBody)},
		{"DELETE", "/v1/operations/{id}", done(h, "id", h.svc.DeleteOperation)},
		{"POST", "/v1/operations/{id}/cancel", h.cancelOperation},
	}
}

// Routes lists every route the handler serves (tests compare it with the
// OpenAPI document).
func (h *Handler) Routes() []Route {
	var out []Route
	for _, r := range h.routes() {
		out = append(out, Route{r.Method, r.Pattern})
	}
	return out
}

// ServeHTTP implements http.Handler: every request passes the guard
// (admit) first; unknown paths and methods get JSON errors like every
// other failure. Every request is a span (tracing.go).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, pattern := h.mux.Handler(r)
	id := httpreq.NewID()
	w.Header().Set(RequestIDHeader, id)
	if h.opts.NodeName != "" {
		w.Header().Set(NodeHeader, h.opts.NodeName)
	}
	sw := httpreq.NewStatusWriter(w)
	defer func() {
		if h.svc.Host != nil {
			h.svc.Metrics().Request(pattern, sw.Status, time.Since(start))
		}
	}()
	r, ok := h.admit(sw, r, pattern)
	r, sp := h.startSpan(r, pattern, id, start, ok)
	defer func() { endSpan(sp, sw.Status) }()
	if !ok {
		args := append(logAttrs(r.Context(), id), "method", r.Method, "path", r.URL.Path, "host", r.Host, "origin", r.Header.Get("Origin"))
		if c, _ := daemon.CallerFrom(r.Context()); c.Unix {
			args = append(args, "uid", c.UID, "pid", c.PID)
		} else {
			args = append(args, "remote", r.RemoteAddr)
		}
		h.log.Info("request refused", args...)
		return
	}
	if pattern == "" {
		if allowed := h.allowedMethods(r.URL.Path); len(allowed) > 0 {
			w.Header().Set("Allow", strings.Join(allowed, ", "))
			writeError(sw, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path))
		} else {
			writeError(sw, http.StatusNotFound, "not_found", "no such endpoint: "+r.URL.Path)
		}
		return
	}
	h.mux.ServeHTTP(sw, r)
	h.log.Debug("request", append(logAttrs(r.Context(), id), "method", r.Method, "path", r.URL.Path, "status", sw.Status, "ms", time.Since(start).Milliseconds())...)
}

// metrics serves the daemon's metrics in Prometheus' text format.
func (h *Handler) metrics(w http.ResponseWriter, r *http.Request) {
	promhttp.HandlerFor(h.svc.Metrics().Registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// allowedMethods lists the methods routed for path (for 405's Allow).
func (h *Handler) allowedMethods(path string) []string {
	var out []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		req, _ := http.NewRequest(m, path, nil)
		if _, p := h.mux.Handler(req); p != "" {
			out = append(out, m)
		}
	}
	return out
}

// ErrorBody is every error's JSON.
type ErrorBody = wire.Error

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var b ErrorBody
	b.Error.Code, b.Error.Message, b.Error.RequestID = code, msg, w.Header().Get(RequestIDHeader)
	writeJSON(w, status, b)
}

// RequestIDHeader carries every request's id in its answer.
const RequestIDHeader = httpreq.IDHeader

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// failures map the service's errors to status codes and error codes, in
// the order they are tested; anything else is 500 internal.
var failures = []struct {
	err    error
	status int
	code   string
}{
	{daemon.ErrInvalid, http.StatusBadRequest, "invalid"},
	{daemon.ErrNotFound, http.StatusNotFound, "not_found"},
	{daemon.ErrExists, http.StatusConflict, "exists"},
	{daemon.ErrConflict, http.StatusConflict, "conflict"},
	{daemon.ErrSnapshotUnusable, http.StatusUnprocessableEntity, "snapshot_unusable"},
	{daemon.ErrTimeout, http.StatusGatewayTimeout, "timeout"},
	{daemon.ErrImport, http.StatusBadGateway, "import_failed"},
	{daemon.ErrVMFailed, http.StatusBadGateway, "vm_failed"},
	{daemon.ErrForbidden, http.StatusForbidden, "forbidden"},
	{daemon.ErrTooMany, http.StatusTooManyRequests, "too_many"},
	{daemon.ErrNoSpace, http.StatusInsufficientStorage, "no_space"},
	{daemon.ErrRegistryUnavailable, http.StatusServiceUnavailable, "registry_unavailable"},
	{daemon.ErrIndexUnavailable, http.StatusServiceUnavailable, "index_unavailable"},
	{triggers.ErrEngine, http.StatusServiceUnavailable, "engine_unavailable"},
	{context.Canceled, 499, "canceled"},
}

// statusOf is a service error's status code and error code.
func statusOf(err error) (status int, code string) {
	for _, f := range failures {
		if errors.Is(err, f.err) {
			return f.status, f.code
		}
	}
	return http.StatusInternalServerError, "internal"
}

// fail maps a service error to its status code.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code := statusOf(err)
	if status == http.StatusTooManyRequests {
		w.Header().Set("Retry-After", "1")
	}
	failSpan(r.Context(), status, err)
	if status >= 500 {
		h.log.Error("request failed", append(logAttrs(r.Context(), w.Header().Get(RequestIDHeader)), "method", r.Method, "path", r.URL.Path, "err", err)...)
	}
	writeError(w, status, code, err.Error())
}

// decode reads a JSON body strictly: unknown fields, trailing data, bodies
// over limit and malformed JSON are all 400.
func decode(w http.ResponseWriter, r *http.Request, limit int64, v any) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	b, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fmt.Errorf("%w: request body exceeds %d bytes", daemon.ErrInvalid, limit)
		}
		return fmt.Errorf("%w: read body: %v", daemon.ErrInvalid, err)
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return fmt.Errorf("%w: request body is empty; send a JSON object", daemon.ErrInvalid)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: malformed JSON: %v", daemon.ErrInvalid, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: malformed JSON: trailing data after the object", daemon.ErrInvalid)
	}
	return nil
}

func (h *Handler) openapi(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(OpenAPI)
}

func (h *Handler) info(w http.ResponseWriter, r *http.Request) {
	i := h.svc.Info()
	i.Node = h.opts.NodeName
	writeJSON(w, http.StatusOK, i)
}

// list wraps collections as {"items": [...]} so they can grow fields.
// reply answers err, or v as the body with status.
func reply[T any](h *Handler, w http.ResponseWriter, r *http.Request, status int, v T, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, status, v)
}

// replyAs answers err, or row as its API body.
func replyAs[R, B any](h *Handler, w http.ResponseWriter, r *http.Request, status int, row R, err error, body func(R) B) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, status, body(row))
}

// replyPage answers err, or a page of rows as a collection of their API
// bodies with the cursor of the next page.
func replyPage[R, B any](h *Handler, w http.ResponseWriter, r *http.Request, rows []R, next string, err error, body func(R) B) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.List[B]{Items: daemon.Bodies(rows, body), Next: next})
}

// Pages: ?limit (1 to maxPage, default defaultPage) and ?after, the
// opaque cursor a page's next gave.
const (
	defaultPage = 100
	maxPage     = 1000
)

// pageOf reads a page's limit and cursor (decoded).
func pageOf(r *http.Request) (limit int, after string, err error) {
	q := r.URL.Query()
	if limit, err = intParam(q.Get("limit")); err != nil {
		return 0, "", err
	}
	if limit < 0 || limit > maxPage {
		return 0, "", fmt.Errorf("%w: limit %d: use 1 to %d", daemon.ErrInvalid, limit, maxPage)
	}
	if limit == 0 {
		limit = defaultPage
	}
	if c := q.Get("after"); c != "" {
		b, derr := base64.RawURLEncoding.DecodeString(c)
		if derr != nil || len(b) == 0 {
			return 0, "", fmt.Errorf("%w: after %q is not a cursor this API gave", daemon.ErrInvalid, c)
		}
		after = string(b)
	}
	return limit, after, nil
}

func cursor(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

// paginate takes the page after the cursor from rows sorted by key.
func paginate[R any](rows []R, key func(R) string, after string, limit int) ([]R, string) {
	i := 0
	if after != "" {
		i = sort.Search(len(rows), func(i int) bool { return key(rows[i]) > after })
	}
	rows = rows[i:]
	if len(rows) <= limit {
		return rows, ""
	}
	return rows[:limit], cursor(key(rows[limit-1]))
}

// createdKey orders rows by creation, then id (the catalog's order).
func createdKey(t time.Time, id string) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z") + "|" + id
}

// one serves an operation on the resource the path names by param ("":
// none), answering its API body with status.
func one[R, B any](h *Handler, param string, status int, op func(context.Context, string) (R, error), body func(R) B) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		v, err := op(r.Context(), r.PathValue(param))
		replyAs(h, w, r, status, v, err, body)
	}
}

// list serves a collection in pages, its rows sorted by key.
func list[R, B any](h *Handler, op func(context.Context, *http.Request) ([]R, error), key func(R) string, body func(R) B) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		limit, after, err := pageOf(r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		rows, err := op(r.Context(), r)
		page, next := paginate(rows, key, after, limit)
		replyPage(h, w, r, page, next, err, body)
	}
}

// done serves an operation that answers 204.
func done(h *Handler, param string, op func(context.Context, string) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { replyDone(h, w, r, op(r.Context(), r.PathValue(param))) }
}

// same is a body that is its value.
func same[T any](v T) T { return v }

// replyDone answers err, or 204.
func replyDone(h *Handler, w http.ResponseWriter, r *http.Request, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (h *Handler) createFunction(w http.ResponseWriter, r *http.Request) {
	spec, err := readCreateFunction(w, r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	f, err := h.svc.CreateFunction(r.Context(), spec)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			err = fmt.Errorf("%w: archive exceeds %d bytes", daemon.ErrInvalid, int64(maxArchiveBody))
		}
		h.fail(w, r, err)
		return
	}
	body := daemon.FunctionBody(f)
	body.Warnings = h.svc.ImportWarnings(r.Context(), f)
	writeJSON(w, http.StatusCreated, body)
}

// readCreateFunction decodes either form of POST /v1/functions: a tar.gz
// body (read later by the service) with query parameters, or JSON naming
// a directory on the daemon's host.
func readCreateFunction(w http.ResponseWriter, r *http.Request) (daemon.FunctionSpec, error) {
	var spec daemon.FunctionSpec
	if isArchive(r) {
		spec.Name = r.URL.Query().Get("name")
		if err := archiveSettings(r.URL.Query(), &spec); err != nil {
			return spec, err
		}
		spec.Archive = http.MaxBytesReader(w, r.Body, maxArchiveBody)
		return spec, nil
	}
	req, err := decodeDirectoryRequest(w, r, maxControlBody, func(req *wire.CreateFunctionRequest) string { return req.Directory })
	if err != nil {
		return spec, err
	}
	spec = daemon.FunctionSpec{Name: req.Name, Directory: req.Directory, MemoryMiB: req.MemoryMiB, VCPUs: req.VCPUs,
		MaxConcurrency: req.MaxConcurrency, KeepAliveS: req.KeepAliveS, VMMPool: req.VMMPool, VMMPoolTTLS: req.VMMPoolTTLS,
		Env: req.Env, Secrets: req.Secrets, Strategy: req.Strategy, Refresh: req.Refresh, Network: networkPolicy(req.Network)}
	return spec, nil
}

// decodeDirectoryRequest decodes the JSON form of a request that brings a
// function's code: it names a directory on the daemon's host (directory
// reads it from the request), which it must, instead of uploading a tar.gz.
func decodeDirectoryRequest[R any](w http.ResponseWriter, r *http.Request, limit int64, directory func(*R) string) (*R, error) {
	req := new(R)
	if err := decode(w, r, limit, req); err != nil {
		return nil, err
	}
	if directory(req) == "" {
		return nil, fmt.Errorf("%w: directory is required (or upload a tar.gz with Content-Type application/gzip)", daemon.ErrInvalid)
	}
	return req, nil
}

// networkPolicy is a request's network settings (absent: egress none).
func networkPolicy(n *wire.Network) vmnet.Policy {
	if n == nil {
		return vmnet.Policy{}
	}
	return vmnet.Policy{Egress: vmnet.Egress(n.Egress), Services: n.Services}
}

// isArchive says whether a request's body is a tar.gz of a function's code.
func isArchive(r *http.Request) bool {
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	mt = strings.ToLower(mt)
	return mt == "application/gzip" || mt == "application/x-gzip"
}

// archiveSettings reads a function's settings from the query parameters
// of an upload of its code.
func archiveSettings(q url.Values, spec *daemon.FunctionSpec) error {
	spec.Network = vmnet.Policy{Egress: vmnet.Egress(q.Get("egress")), Services: q["allow"]}
	for _, p := range []struct {
		name string
		dst  *int
	}{{"memory_mib", &spec.MemoryMiB}, {"vcpus", &spec.VCPUs}, {"max_concurrency", &spec.MaxConcurrency},
		{"keep_alive_s", &spec.KeepAliveS}, {"vmm_pool", &spec.VMMPool}, {"vmm_pool_ttl_s", &spec.VMMPoolTTLS}} {
		n, err := intParam(q.Get(p.name))
		if err != nil {
			return fmt.Errorf("%s: %w", p.name, err)
		}
		*p.dst = n
	}
	spec.Strategy, spec.Refresh = q.Get("strategy"), q.Get("refresh")
	var err error
	spec.Env, spec.Secrets, err = readConfigParams(q)
	return err
}

func intParam(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a number", daemon.ErrInvalid, s)
	}
	return n, nil
}

// readThen serves a route whose request read decodes and checks: what read
// refuses is answered as an error, the rest is serve's.
func readThen[R any](h *Handler, read func(http.ResponseWriter, *http.Request) (R, error), serve func(http.ResponseWriter, *http.Request, R)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		req, err := read(w, r)
		if err != nil {
			h.fail(w, r, err)
			return
		}
		serve(w, r, req)
	}
}

// waiting is a request of a route that can also start an operation
// (wait=false) and return at once.
type waiting[R any] struct {
	wait bool
	req  R
}

// readWaiting reads the wait parameter, then the request with read.
func readWaiting[R any](read func(http.ResponseWriter, *http.Request) (R, error)) func(http.ResponseWriter, *http.Request) (waiting[R], error) {
	return func(w http.ResponseWriter, r *http.Request) (waiting[R], error) {
		wait, err := waitParam(r)
		if err != nil {
			return waiting[R]{}, err
		}
		req, err := read(w, r)
		return waiting[R]{wait, req}, err
	}
}

func decodeInvoke(w http.ResponseWriter, r *http.Request) (*wire.InvokeRequest, error) {
	var req wire.InvokeRequest
	if err := decode(w, r, maxInvokeBody, &req); err != nil {
		return nil, err
	}
	return &req, nil
}

func invokeOf(req *wire.InvokeRequest) daemon.InvokeRequest {
	return daemon.InvokeRequest{Event: req.Event, Timeout: time.Duration(req.TimeoutMS) * time.Millisecond,
		EvictCache: req.EvictCache, Logs: req.Logs}
}

// readInvokeFunction decodes POST /v1/functions/{name}/invoke.
func readInvokeFunction(w http.ResponseWriter, r *http.Request) (daemon.ColdRequest, error) {
	req, err := decodeInvoke(w, r)
	if err != nil {
		return daemon.ColdRequest{}, err
	}
	name := r.PathValue("name") // NAME, NAME:VERSION or NAME:ALIAS
	if _, err := daemon.ParseRef(name); err != nil {
		return daemon.ColdRequest{}, err
	}
	return daemon.ColdRequest{InvokeRequest: invokeOf(req), Function: name, Snapshot: req.Snapshot, Strategy: req.Strategy,
		Variant: req.Variant, Strict: req.Strict}, nil
}

// invokeCold serves a cold invocation.
func (h *Handler) invokeCold(w http.ResponseWriter, r *http.Request, cr daemon.ColdRequest) {
	inv, err := h.svc.InvokeCold(r.Context(), cr)
	h.answerInvocation(w, r, withLogs(inv, cr.Logs), err)
}

// readInvokeSnapshot decodes POST /v1/snapshots/{id}/invoke.
func readInvokeSnapshot(w http.ResponseWriter, r *http.Request) (daemon.ColdRequest, error) {
	req, err := decodeInvoke(w, r)
	if err != nil {
		return daemon.ColdRequest{}, err
	}
	if req.Snapshot != "" {
		return daemon.ColdRequest{}, fmt.Errorf("%w: snapshot is given by the path", daemon.ErrInvalid)
	}
	return daemon.ColdRequest{InvokeRequest: invokeOf(req), Snapshot: r.PathValue("id"), Strategy: req.Strategy,
		Variant: req.Variant, Strict: req.Strict}, nil
}

// readInvokeVM decodes POST /v1/vms/{id}/invoke (warm: no cold options).
func readInvokeVM(w http.ResponseWriter, r *http.Request) (daemon.InvokeRequest, error) {
	req, err := decodeInvoke(w, r)
	if err != nil {
		return daemon.InvokeRequest{}, err
	}
	if req.Strategy != "" || req.Variant != "" || req.Snapshot != "" || req.EvictCache || req.Strict {
		return daemon.InvokeRequest{}, fmt.Errorf("%w: strategy, variant, snapshot, evict_cache and strict apply to cold invocations only", daemon.ErrInvalid)
	}
	return invokeOf(req), nil
}

func (h *Handler) invokeVM(w http.ResponseWriter, r *http.Request, ir daemon.InvokeRequest) {
	inv, err := h.svc.InvokeVM(r.Context(), r.PathValue("id"), ir)
	h.answerInvocation(w, r, withLogs(inv, ir.Logs), err)
}

// answerInvocation: a handler that raised is still a completed invocation
// (200 with ok=false and the structured error), like Lambda's function
// errors; only platform failures get error statuses.
func (h *Handler) answerInvocation(w http.ResponseWriter, r *http.Request, inv *daemon.Invocation, err error) {
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.writeInvocation(w, inv)
}

// readPrepare decodes POST /v1/functions/{name}/prepare.
func readPrepare(w http.ResponseWriter, r *http.Request) (daemon.PrepareRequest, error) {
	var req wire.PrepareRequest
	if err := decode(w, r, maxInvokeBody, &req); err != nil {
		return daemon.PrepareRequest{}, err
	}
	name := r.PathValue("name") // NAME, NAME:VERSION or NAME:ALIAS
	if _, err := daemon.ParseRef(name); err != nil {
		return daemon.PrepareRequest{}, err
	}
	return daemon.PrepareRequest{Function: name, RecordEvent: req.RecordEvent, GroupSize: req.GroupSize,
		MergeGap: req.MergeGap, Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, FaaSnapVariants: req.FaaSnapVariants}, nil
}

// readListInvocations reads GET /v1/invocations' query: function, limit
// and the cursor.
func readListInvocations(r *http.Request) (function string, limit int, after string, err error) {
	limit, after, err = pageOf(r)
	return r.URL.Query().Get("function"), limit, after, err
}

// listInvocations pages newest first: the cursor is the last record's
// creation and id, and the next page is what came before it.
func (h *Handler) listInvocations(w http.ResponseWriter, r *http.Request) {
	function, limit, after, err := readListInvocations(r)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var before time.Time
	var beforeID string
	if after != "" {
		at, id, ok := strings.Cut(after, "|")
		if before, err = time.Parse("2006-01-02T15:04:05.000000000Z", at); err != nil || !ok {
			h.fail(w, r, fmt.Errorf("%w: after is not a cursor this API gave", daemon.ErrInvalid))
			return
		}
		beforeID = id
	}
	invs, err := h.svc.ListInvocations(r.Context(), function, limit+1, before, beforeID)
	next := ""
	if len(invs) > limit {
		invs = invs[:limit]
		last := invs[limit-1]
		next = cursor(createdKey(last.CreatedAt, last.ID))
	}
	replyPage(h, w, r, invs, next, err, daemon.InvocationRecordBody)
}

// readCreateVM decodes POST /v1/vms: a function to boot, or a snapshot
// (with an optional strategy) to restore.
func readCreateVM(w http.ResponseWriter, r *http.Request) (wire.CreateVMRequest, error) {
	var req wire.CreateVMRequest
	if err := decode(w, r, maxControlBody, &req); err != nil {
		return req, err
	}
	boot := req.Function != "" && req.Snapshot == "" && req.Strategy == ""
	if restore := req.Snapshot != "" && req.Function == ""; !boot && !restore {
		return req, fmt.Errorf("%w: give either function (boot) or snapshot with an optional strategy (restore)", daemon.ErrInvalid)
	}
	return req, nil
}

func (h *Handler) createVM(w http.ResponseWriter, r *http.Request, wr waiting[wire.CreateVMRequest]) {
	req := wr.req
	if !wr.wait {
		if req.Function == "" {
			h.fail(w, r, fmt.Errorf("%w: wait=false applies to boots (function); a restore is quick, send it without", daemon.ErrInvalid))
			return
		}
		op, err := h.svc.StartBoot(h.opContext(w, r), req.Function)
		h.accepted(w, r, op, err)
		return
	}
	var v *catalog.VM
	var t *daemon.RestoreTiming
	var err error
	if req.Function != "" {
		v, err = h.svc.BootVM(r.Context(), req.Function)
	} else {
		v, t, err = h.svc.RestoreVM(r.Context(), req.Snapshot, req.Strategy)
	}
	replyAs(h, w, r, http.StatusCreated, v, err, func(v *catalog.VM) *wire.VM { return daemon.VMBody(v, t) })
}

// readCreateSnapshot decodes POST /v1/snapshots.
func readCreateSnapshot(w http.ResponseWriter, r *http.Request) (wire.CreateSnapshotRequest, error) {
	var req wire.CreateSnapshotRequest
	err := decode(w, r, maxControlBody, &req)
	return req, err
}

func (h *Handler) createSnapshot(w http.ResponseWriter, r *http.Request, req wire.CreateSnapshotRequest) {
	s, err := h.svc.CreateSnapshot(r.Context(), req.VM)
	replyAs(h, w, r, http.StatusCreated, s, err, daemon.SnapshotBody)
}

func (h *Handler) snapshotMemory(w http.ResponseWriter, r *http.Request) {
	m, err := h.svc.SnapshotMemory(r.Context(), r.PathValue("id"))
	reply(h, w, r, http.StatusOK, m, err)
}

func (h *Handler) evictSnapshot(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := h.svc.EvictSnapshot(r.Context(), id); err != nil {
		h.fail(w, r, err)
		return
	}
	h.snapshotMemory(w, r) // what is left in the page cache: nothing, unless in use
}
