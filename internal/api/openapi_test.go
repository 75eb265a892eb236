package api

// Conformance of openapi.json with the code: the document is valid and
// self-contained, documents exactly the routes the handler serves with the
// status codes the handlers answer, and its schemas have the fields (names,
// types, required-ness) that encoding/json produces for the Go types the
// handlers read and write. Nothing here needs a daemon or a VM.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/metrics"

	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/api/apitest"
	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/guestimage"
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/triggers"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/wire"
)

type jsonObject = map[string]any

// newTestHandler builds the handler without a service: New and routes()
// only take method values (h.info, ...), so nothing touches the nil
// *daemon.Service until a route that uses it is actually served. TCP
// requests need testToken.
func newTestHandler() *Handler {
	return NewServices(noDaemon(), slog.New(slog.NewTextHandler(io.Discard, nil)), Options{Token: testToken})
}

func loadDoc(t *testing.T) jsonObject {
	t.Helper()
	var doc jsonObject
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.json does not parse: %v", err)
	}
	return doc
}

// pointer resolves a local JSON pointer ("#/components/schemas/VM").
func pointer(doc jsonObject, ref string) (any, error) {
	rest, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, fmt.Errorf("%q is not a local reference", ref)
	}
	var cur any = doc
	for _, tok := range strings.Split(rest, "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		m, ok := cur.(jsonObject)
		if !ok {
			return nil, fmt.Errorf("%q: %q is not inside an object", ref, tok)
		}
		if cur, ok = m[tok]; !ok {
			return nil, fmt.Errorf("%q: no %q", ref, tok)
		}
	}
	return cur, nil
}

// deref follows $ref until an object without one.
func deref(t *testing.T, doc jsonObject, v any) jsonObject {
	t.Helper()
	for range 32 {
		m, ok := v.(jsonObject)
		if !ok {
			t.Fatalf("expected an object, got %T", v)
		}
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		var err error
		if v, err = pointer(doc, ref); err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("reference loop")
	return nil
}

func schemaRef(name string) string { return "#/components/schemas/" + name }

func schemaByName(t *testing.T, doc jsonObject, name string) jsonObject {
	t.Helper()
	return deref(t, doc, jsonObject{"$ref": schemaRef(name)})
}

// flat is a schema with its $ref and allOf resolved: the union of the
// properties and required lists, and the first type found.
type flat struct {
	props    map[string]jsonObject
	required []string
	typ      string
	format   string
	addl     any
}

func flatten(t *testing.T, doc jsonObject, s jsonObject) flat {
	t.Helper()
	f := flat{props: map[string]jsonObject{}}
	var walk func(jsonObject)
	walk = func(s jsonObject) {
		s = deref(t, doc, s)
		if f.typ == "" {
			f.typ, _ = s["type"].(string)
			f.format, _ = s["format"].(string)
		}
		if a, ok := s["additionalProperties"]; ok && f.addl == nil {
			f.addl = a
		}
		for name, p := range asObject(s["properties"]) {
			if _, dup := f.props[name]; dup {
				t.Errorf("property %q is declared twice across allOf", name)
			}
			f.props[name] = p.(jsonObject)
		}
		for _, r := range asSlice(s["required"]) {
			f.required = append(f.required, r.(string))
		}
		for _, sub := range asSlice(s["allOf"]) {
			walk(sub.(jsonObject))
		}
	}
	walk(s)
	sort.Strings(f.required)
	return f
}

func asObject(v any) jsonObject { m, _ := v.(jsonObject); return m }
func asSlice(v any) []any       { s, _ := v.([]any); return s }

var httpMethods = []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}

type operation struct {
	method, path string
	op           jsonObject
	pathItem     jsonObject
}

func (o operation) key() string { return strings.ToUpper(o.method) + " " + o.path }

func operations(t *testing.T, doc jsonObject) []operation {
	t.Helper()
	var out []operation
	for path, item := range asObject(doc["paths"]) {
		for _, m := range httpMethods {
			if op, ok := asObject(item)[m].(jsonObject); ok {
				out = append(out, operation{m, path, op, item.(jsonObject)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key() < out[j].key() })
	return out
}

// walkRefs calls fn with every $ref in v.
func walkRefs(v any, at string, fn func(at, ref string)) {
	switch v := v.(type) {
	case jsonObject:
		for k, x := range v {
			if k == "$ref" {
				s, _ := x.(string)
				fn(at, s)
				continue
			}
			walkRefs(x, at+"/"+k, fn)
		}
	case []any:
		for i, x := range v {
			walkRefs(x, at+"/"+strconv.Itoa(i), fn)
		}
	}
}

func TestOpenAPIDocumentIsValid(t *testing.T) {
	// kin-openapi: the document parses, every $ref resolves, operations
	// have unique ids, responses descriptions, path parameters match their
	// templates, schemas are valid, examples match their schemas.
	checker(t)
	doc := loadDoc(t)
	if v, _ := doc["openapi"].(string); !regexp.MustCompile(`^3\.0\.\d+$`).MatchString(v) {
		t.Errorf("openapi = %q, want 3.0.x", v)
	}
	info := asObject(doc["info"])
	if info["title"] == nil || info["version"] != daemon.APIVersion {
		t.Errorf("info.version = %v, want daemon.APIVersion %q (and a title)", info["version"], daemon.APIVersion)
	}

	// Every component is used (security schemes by their names in
	// security requirements).
	used := map[string]bool{}
	walkRefs(doc, "#", func(_, ref string) { used[ref] = true })
	requirements := asSlice(doc["security"])
	for _, o := range operations(t, doc) {
		requirements = append(requirements, asSlice(o.op["security"])...)
	}
	for _, req := range requirements {
		for name := range asObject(req) {
			used["#/components/securitySchemes/"+name] = true
		}
	}
	for kind, comps := range asObject(doc["components"]) {
		for name := range asObject(comps) {
			if ref := "#/components/" + kind + "/" + name; !used[ref] {
				t.Errorf("%s is never referenced", ref)
			}
		}
	}
	for _, o := range operations(t, doc) {
		for _, f := range []string{"operationId", "summary", "description"} {
			if s, _ := o.op[f].(string); strings.TrimSpace(s) == "" {
				t.Errorf("%s: no %s", o.key(), f)
			}
		}
	}

	// The file is stored as encoding/json would indent it (2 spaces).
	var compact, indented bytes.Buffer
	if err := json.Compact(&compact, OpenAPI); err != nil {
		t.Fatal(err)
	}
	if err := json.Indent(&indented, compact.Bytes(), "", "  "); err != nil {
		t.Fatal(err)
	}
	indented.WriteByte('\n')
	if !bytes.Equal(indented.Bytes(), OpenAPI) {
		t.Error("openapi.json is not indented with 2 spaces (as json.Indent would) or lacks the final newline")
	}
}

func TestOpenAPIRoutesMatchHandler(t *testing.T) {
	doc := loadDoc(t)
	h := newTestHandler()
	served := map[string]bool{}
	for _, r := range h.Routes() {
		// Go 1.22 patterns use the same {name} braces as OpenAPI; a
		// wildcard such as {rest...} would need translating.
		if strings.Contains(r.Pattern, "...}") {
			t.Fatalf("pattern %q: translate multi-segment wildcards before comparing", r.Pattern)
		}
		served[r.Method+" "+r.Pattern] = true
	}
	documented := map[string]bool{}
	for _, o := range operations(t, doc) {
		documented[o.key()] = true
	}
	for k := range served {
		if !documented[k] {
			t.Errorf("route %s is served but not documented", k)
		}
	}
	for k := range documented {
		if !served[k] {
			t.Errorf("operation %s is documented but not served", k)
		}
	}
}

func keys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// handlerIO says, per route, what the handler answers on success and which
// body it decodes (read off the handlers in api.go).
var handlerIO = map[string]struct {
	status   string
	response string // schema of the success body; "" for none
	request  string // schema of the JSON request body; "" for none
}{
	"GET /v1/openapi.json":                        {"200", "", ""},
	"GET /metrics":                                {"200", "", ""},
	"GET /v1/info":                                {"200", "Info", ""},
	"GET /v1/health":                              {"200", "Health", ""},
	"GET /v1/functions":                           {"200", "FunctionList", ""},
	"POST /v1/functions":                          {"201", "Function", "CreateFunctionRequest"},
	"GET /v1/functions/{name}":                    {"200", "Function", ""},
	"DELETE /v1/functions/{name}":                 {"200", "FunctionDeletion", ""},
	"POST /v1/functions/{name}/invoke":            {"200", "Invocation", "InvokeRequest"},
	"POST /v1/functions/{name}/prepare":           {"201", "PrepareResult", "PrepareRequest"},
	"GET /v1/vms":                                 {"200", "VMList", ""},
	"POST /v1/vms":                                {"201", "CreatedVM", "CreateVMRequest"},
	"GET /v1/vms/{id}":                            {"200", "VM", ""},
	"DELETE /v1/vms/{id}":                         {"204", "", ""},
	"POST /v1/vms/{id}/pause":                     {"200", "VM", ""},
	"POST /v1/vms/{id}/resume":                    {"200", "VM", ""},
	"POST /v1/vms/{id}/invoke":                    {"200", "Invocation", "InvokeRequest"},
	"GET /v1/snapshots":                           {"200", "SnapshotList", ""},
	"POST /v1/snapshots":                          {"201", "Snapshot", "CreateSnapshotRequest"},
	"GET /v1/snapshots/{id}":                      {"200", "Snapshot", ""},
	"DELETE /v1/snapshots/{id}":                   {"204", "", ""},
	"POST /v1/snapshots/{id}/verify":              {"200", "Snapshot", ""},
	"POST /v1/snapshots/{id}/invoke":              {"200", "Invocation", "InvokeRequest"},
	"POST /v1/snapshots/{id}/copy":                {"201", "Snapshot", ""},
	"POST /v1/snapshots/{id}/push":                {"200", "PushResult", ""},
	"POST /v1/snapshots/pull":                     {"201", "PullResult", "PullRequest"},
	"GET /v1/registry/snapshots":                  {"200", "RegistrySnapshotList", ""},
	"DELETE /v1/registry/snapshots/{id}":          {"204", "", ""},
	"POST /v1/registry/gc":                        {"200", "GCResult", "GCRequest"},
	"GET /v1/invocations":                         {"200", "InvocationList", ""},
	"PUT /v1/snapshots/{id}/store":                {"200", "StoreEntry", ""},
	"DELETE /v1/snapshots/{id}/store":             {"204", "", ""},
	"PUT /v1/snapshots/{id}/pin":                  {"200", "Snapshot", ""},
	"DELETE /v1/snapshots/{id}/pin":               {"204", "", ""},
	"POST /v1/snapshots/{id}/evict":               {"200", "SnapshotMemory", ""},
	"GET /v1/snapshots/{id}/memory":               {"200", "SnapshotMemory", ""},
	"GET /v1/store":                               {"200", "StoreInfo", ""},
	"GET /v1/vms/{id}/memory":                     {"200", "VMMemory", ""},
	"GET /v1/operations":                          {"200", "OperationList", ""},
	"GET /v1/operations/{id}":                     {"200", "Operation", ""},
	"DELETE /v1/operations/{id}":                  {"204", "", ""},
	"POST /v1/operations/{id}/cancel":             {"200", "Operation", ""},
	"GET /v1/functions/{name}/versions":           {"200", "VersionList", ""},
	"GET /v1/functions/{name}/versions/{version}": {"200", "Version", ""},
	"GET /v1/functions/{name}/aliases":            {"200", "AliasList", ""},
	"GET /v1/functions/{name}/aliases/{alias}":    {"200", "Alias", ""},
	"PUT /v1/functions/{name}/aliases/{alias}":    {"200", "Alias", "AliasRequest"},
	"DELETE /v1/functions/{name}/aliases/{alias}": {"204", "", ""},
	"POST /v1/functions/{name}/rollback":          {"200", "Rollback", "RollbackRequest"},
	"POST /v1/functions/{name}/deploy":            {"201", "Deploy", "DeployRequest"},
	"GET /v1/secrets":                             {"200", "SecretList", ""},
	"GET /v1/secrets/{name}":                      {"200", "Secret", ""},
	"PUT /v1/secrets/{name}":                      {"200", "Secret", "SetSecretRequest"},
	"DELETE /v1/secrets/{name}":                   {"204", "", ""},
	"GET /v1/functions/{name}/restore":            {"200", "FunctionRestore", ""},
	"PUT /v1/functions/{name}/restore":            {"200", "FunctionRestore", "RestoreSettings"},
	"POST /v1/functions/{name}/refresh":           {"200", "WorkingSetRefresh", "RefreshRequest"},
	"GET /v1/functions/{name}/logs":               {"200", "LogPage", ""},
	"GET /v1/endpoints":                           {"200", "EndpointList", ""},
	"POST /v1/endpoints":                          {"201", "Endpoint", "CreateEndpointRequest"},
	"GET /v1/endpoints/{name}":                    {"200", "Endpoint", ""},
	"DELETE /v1/endpoints/{name}":                 {"204", "", ""},
	"POST /v1/endpoints/{name}/rotate-key":        {"200", "Endpoint", ""},
	"GET /v1/functions/{name}/async":              {"200", "AsyncConfig", ""},
	"PUT /v1/functions/{name}/async":              {"200", "AsyncConfig", "AsyncConfigRequest"},
	"DELETE /v1/functions/{name}/async":           {"204", "", ""},
	"GET /v1/async/{id}":                          {"200", "AsyncInvocation", ""},
	"GET /v1/dead-letters":                        {"200", "DeadLetterList", ""},
	"DELETE /v1/dead-letters":                     {"200", "PurgeResult", ""},
	"GET /v1/dead-letters/{id}":                   {"200", "DeadLetter", ""},
	"POST /v1/dead-letters/{id}/replay":           {"202", "", ""},
	"GET /v1/schedules":                           {"200", "ScheduleList", ""},
	"POST /v1/schedules":                          {"201", "Schedule", "CreateScheduleRequest"},
	"GET /v1/schedules/{name}":                    {"200", "Schedule", ""},
	"DELETE /v1/schedules/{name}":                 {"204", "", ""},
	"POST /v1/schedules/{name}/pause":             {"200", "Schedule", ""},
	"POST /v1/schedules/{name}/resume":            {"200", "Schedule", ""},
}

// queuesAsync are the routes that answer 202 with an asynchronous
// invocation (api.acceptedAsync): the invoke route with ?async=true, and
// a dead letter's replay.
var queuesAsync = map[string]bool{
	"POST /v1/functions/{name}/invoke":  true,
	"POST /v1/dead-letters/{id}/replay": true,
}

// unguarded are the routes the guard lets through without a token, a
// Host check or the starting state's 503 (admit).
var unguarded = map[string]bool{healthPattern: true}

// checkUnguarded: an unguarded route documents no security requirement
// and answers only its own body, 200 or 503.
func checkUnguarded(t *testing.T, o operation, body string) {
	t.Helper()
	sec := asSlice(o.op["security"])
	if len(sec) != 1 || len(asObject(sec[0])) != 0 {
		t.Errorf("%s: must document security [{}] (no token), got %v", o.key(), o.op["security"])
	}
	responses := asObject(o.op["responses"])
	if len(responses) != 2 {
		t.Errorf("%s: documents %v, want only 200 and 503", o.key(), keys(responses))
	}
	for _, status := range []string{"200", "503"} {
		media := asObject(asObject(asObject(responses[status])["content"])["application/json"])
		if got := asObject(media["schema"])["$ref"]; got != schemaRef(body) {
			t.Errorf("%s %s: schema %v, want %s", o.key(), status, got, schemaRef(body))
		}
	}
}

// startsOperations are the long requests that take ?wait=false and then
// answer 202 with an Operation (api.accepted).
var startsOperations = map[string]bool{
	"POST /v1/vms":                      true,
	"POST /v1/functions/{name}/prepare": true,
	"PUT /v1/snapshots/{id}/store":      true,
	"POST /v1/snapshots/{id}/copy":      true,
	"POST /v1/snapshots/{id}/push":      true,
	"POST /v1/snapshots/pull":           true,
	"POST /v1/registry/gc":              true,
	"POST /v1/functions/{name}/deploy":  true,
	"POST /v1/functions/{name}/refresh": true,
}

// actions are POST operations on a fixed path that act on what is there
// rather than create something: they answer 200.
var actions = map[string]bool{
	"POST /v1/registry/gc": true,
}

// createsUnderPath are POST operations on a parameterized path that
// nevertheless create resources, so answer 201: prepare publishes the
// function's clean and warm snapshots.
var createsUnderPath = map[string]bool{
	"POST /v1/functions/{name}/prepare": true,
	"POST /v1/snapshots/{id}/copy":      true,
	"POST /v1/functions/{name}/deploy":  true, // a version
}

// deletesWithBody are DELETE operations that answer 200 with what they
// removed instead of 204.
var deletesWithBody = map[string]bool{
	"DELETE /v1/functions/{name}": true, // its VMs, snapshots, versions with cascade
}

// failSentinels are the errors fail() tells apart, by the expression
// api.go names them with. TestFailSentinelsAreComplete keeps the list in
// step with fail() and with the daemon's sentinels.
var failSentinels = map[string]error{
	"daemon.ErrInvalid":             daemon.ErrInvalid,
	"daemon.ErrNotFound":            daemon.ErrNotFound,
	"daemon.ErrExists":              daemon.ErrExists,
	"daemon.ErrConflict":            daemon.ErrConflict,
	"daemon.ErrSnapshotUnusable":    daemon.ErrSnapshotUnusable,
	"daemon.ErrTimeout":             daemon.ErrTimeout,
	"daemon.ErrVMFailed":            daemon.ErrVMFailed,
	"daemon.ErrNoSpace":             daemon.ErrNoSpace,
	"daemon.ErrForbidden":           daemon.ErrForbidden,
	"daemon.ErrTooMany":             daemon.ErrTooMany,
	"daemon.ErrRegistryUnavailable": daemon.ErrRegistryUnavailable,
	"daemon.ErrIndexUnavailable":    daemon.ErrIndexUnavailable,
	"daemon.ErrImport":              daemon.ErrImport,
	"triggers.ErrEngine":            triggers.ErrEngine,
	"context.Canceled":              context.Canceled,
}

// TestFailSentinelsAreComplete: the errors fail() maps must be exactly
// failSentinels, and every exported Err* variable of package daemon must
// be among them (an unmapped sentinel would silently become 500 and be
// undocumented).
func TestFailSentinelsAreComplete(t *testing.T) {
	matched := map[string]bool{}
	for name, e := range failSentinels {
		for _, f := range failures {
			if f.err == e {
				matched[name] = true
			}
		}
	}
	if len(failures) != len(failSentinels) || len(matched) != len(failSentinels) {
		t.Errorf("fail() maps %d errors, failSentinels has %d (%d of them mapped): update failSentinels and document the status in openapi.json",
			len(failures), len(failSentinels), len(matched))
	}
	fset := token.NewFileSet()
	pkgs, err := filepath.Glob("../daemon/*.go")
	if err != nil || len(pkgs) == 0 {
		t.Fatalf("daemon sources: %v", err)
	}
	for _, path := range pkgs {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		df, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range df.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, name := range spec.(*ast.ValueSpec).Names {
					if strings.HasPrefix(name.Name, "Err") && name.IsExported() && !matched["daemon."+name.Name] {
						t.Errorf("daemon.%s (%s) is not mapped by fail(): it would answer 500 internal", name.Name, filepath.Base(path))
					}
				}
			}
		}
	}
}

// failCodes calls fail with every error class the service returns, and
// sends the guard (admit) a request each of its rules refuses, and reports
// the status and code each one gets.
func failCodes(t *testing.T) map[string]int {
	t.Helper()
	h := newTestHandler()
	out := map[string]int{}
	noToken := localRequest("GET", "/v1/info", "", "")
	noToken.Header.Del("Authorization")
	evilHost := localRequest("GET", "/v1/info", "", "")
	evilHost.Host = "evil.example"
	textBody := localRequest("POST", "/v1/vms", "text/plain", "{}")
	starting := localRequest("GET", "/v1/info", "", "")
	for _, r := range []*http.Request{noToken, evilHost, textBody, starting} {
		w := httptest.NewRecorder()
		if r == starting {
			h.SetState(Starting)
		}
		_, ok := h.admit(w, r, "POST /v1/vms")
		h.SetState(Serving)
		if ok {
			t.Fatalf("admit let %s %s through", r.Method, r.URL)
		}
		var b ErrorBody
		if e := json.Unmarshal(w.Body.Bytes(), &b); e != nil {
			t.Fatalf("admit: body %q: %v", w.Body, e)
		}
		out[b.Error.Code] = w.Code
	}
	errs := []error{errors.New("disk full")}
	for _, e := range failSentinels {
		errs = append(errs, e)
	}
	for _, err := range errs {
		w := httptest.NewRecorder()
		h.fail(w, httptest.NewRequest("GET", "/v1/info", nil), fmt.Errorf("wrapped: %w", err))
		var b ErrorBody
		if e := json.Unmarshal(w.Body.Bytes(), &b); e != nil {
			t.Fatalf("fail(%v): body %q: %v", err, w.Body, e)
		}
		out[b.Error.Code] = w.Code
	}
	return out
}

func TestOpenAPIResponsesMatchHandlers(t *testing.T) {
	doc := loadDoc(t)
	codes := failCodes(t)
	errStatus := map[string]bool{}
	for _, st := range codes {
		if st != 499 { // the client is gone; nobody reads it
			errStatus[strconv.Itoa(st)] = true
		}
	}
	for _, o := range operations(t, doc) {
		want, ok := handlerIO[o.key()]
		if !ok {
			t.Errorf("%s: not in handlerIO; add what its handler answers", o.key())
			continue
		}
		responses := asObject(o.op["responses"])
		if unguarded[o.key()] {
			checkUnguarded(t, o, want.response)
			continue
		}
		// The guard answers these on every route.
		for code, ref := range map[string]string{"401": "Unauthenticated", "403": "Forbidden", "415": "UnsupportedMediaType", "503": "Unavailable"} {
			if got := asObject(responses[code])["$ref"]; got != "#/components/responses/"+ref {
				t.Errorf("%s %s: want $ref #/components/responses/%s, got %v", o.key(), code, ref, got)
			}
		}
		success := checkResponses(t, doc, o, want.response, codes, errStatus)
		wantSuccess := []string{want.status}
		if startsOperations[o.key()] || queuesAsync[o.key()] && want.status != "202" {
			wantSuccess = append(wantSuccess, "202")
		}
		sort.Strings(success)
		sort.Strings(wantSuccess)
		if !slices.Equal(success, wantSuccess) {
			t.Errorf("%s: success statuses %v, handler answers %v", o.key(), success, wantSuccess)
		}
		if hasWait := documentsWait(o); hasWait != startsOperations[o.key()] {
			t.Errorf("%s: documents ?wait: %v, starts operations: %v", o.key(), hasWait, startsOperations[o.key()])
		}
		// Creates are 201 and deletes 204, by convention.
		wantStatus := "200"
		if o.method == "post" && (!strings.Contains(o.path, "{") && !actions[o.key()] || createsUnderPath[o.key()]) {
			wantStatus = "201"
		} else if o.method == "delete" && !deletesWithBody[o.key()] {
			wantStatus = "204"
		}
		if queuesAsync[o.key()] && want.status == "202" || o.key() == "DELETE /v1/dead-letters" {
			wantStatus = want.status // queues work; a purge says how much it removed
		}
		if want.status != wantStatus {
			t.Errorf("%s: handler answers %s, convention says %s", o.key(), want.status, wantStatus)
		}

		body := asObject(o.op["requestBody"])
		if want.request == "" {
			if body != nil {
				t.Errorf("%s: the handler reads no body, the document has one", o.key())
			}
			continue
		}
		if body["required"] != true {
			t.Errorf("%s: request body must be required (an empty body is 400)", o.key())
		}
		media := asObject(asObject(body["content"])["application/json"])
		if got := asObject(media["schema"])["$ref"]; got != schemaRef(want.request) {
			t.Errorf("%s: request schema %v, want %s", o.key(), got, schemaRef(want.request))
		}
		if responses["400"] == nil {
			t.Errorf("%s: takes a body, so it must document 400", o.key())
		}
	}

	checkFunctionsTarGz(t, doc)
	checkErrorCodeEnum(t, doc, codes)
}

// documentsWait says whether o documents the ?wait parameter.
func documentsWait(o operation) bool {
	for _, p := range asSlice(o.op["parameters"]) {
		if asObject(p)["$ref"] == "#/components/parameters/Wait" {
			return true
		}
	}
	return false
}

// leadingCode is the error code in backticks that an error response's
// description starts with.
var leadingCode = regexp.MustCompile("^`([a-z_]+)`")

// checkResponses checks each response o documents: 202s an Operation or an
// asynchronous acceptance, other successes exactly one content of the
// handler's responseSchema (204 none), errors an Error of a status fail()
// answers whose description names a code fail() gives that status. It
// returns the success statuses.
func checkResponses(t *testing.T, doc jsonObject, o operation, responseSchema string, codes map[string]int, errStatus map[string]bool) []string {
	t.Helper()
	responses := asObject(o.op["responses"])
	var success []string
	for status, r := range responses {
		r := deref(t, doc, r)
		content := asObject(r["content"])
		switch {
		case status == "202" && queuesAsync[o.key()]:
			success = append(success, status)
			loc := asObject(asObject(r["headers"])["Location"])
			if got := asObject(responses[status])["$ref"]; got != "#/components/responses/AsyncAccepted" || loc["required"] != true ||
				asObject(asObject(content["application/json"])["schema"])["$ref"] != schemaRef("AsyncAccepted") {
				t.Errorf("%s 202: want $ref #/components/responses/AsyncAccepted (AsyncAccepted, a required Location)", o.key())
			}
		case status == "202":
			success = append(success, status)
			if got := asObject(responses[status])["$ref"]; got != "#/components/responses/Accepted" {
				t.Errorf("%s 202: want $ref #/components/responses/Accepted, got %v", o.key(), got)
			}
			loc := asObject(asObject(r["headers"])["Location"])
			if got := asObject(asObject(content["application/json"])["schema"])["$ref"]; got != schemaRef("Operation") || loc["required"] != true {
				t.Errorf("%s 202: want an Operation with a required Location header", o.key())
			}
		case strings.HasPrefix(status, "2"):
			success = append(success, status)
			if status == "204" {
				if content != nil {
					t.Errorf("%s 204: must have no content", o.key())
				}
				continue
			}
			wantType := "application/json"
			if o.key() == "GET /metrics" {
				wantType = "text/plain" // Prometheus' exposition format
			}
			media := asObject(content[wantType])
			if media == nil || len(content) != 1 {
				t.Errorf("%s %s: want exactly %s content", o.key(), status, wantType)
				continue
			}
			if responseSchema != "" {
				if got := asObject(media["schema"])["$ref"]; got != schemaRef(responseSchema) {
					t.Errorf("%s %s: schema %v, want %s", o.key(), status, got, schemaRef(responseSchema))
				}
			}
		case status == "default" || status >= "400":
			media := asObject(content["application/json"])
			if got := asObject(media["schema"])["$ref"]; got != schemaRef("Error") || len(content) != 1 {
				t.Errorf("%s %s: error responses must be application/json Error, got %v", o.key(), status, content)
			}
			if !errStatus[status] {
				t.Errorf("%s %s: fail() never answers this status (it answers %v)", o.key(), status, keys(errStatus))
			}
			// The description names the code, and fail() gives that code this status.
			desc, _ := r["description"].(string)
			m := leadingCode.FindStringSubmatch(desc)
			if m == nil {
				t.Errorf("%s %s: description should start with the error code in backticks", o.key(), status)
			} else if st, ok := codes[m[1]]; !ok || strconv.Itoa(st) != status {
				t.Errorf("%s %s: description names code %q, which fail() answers with %d", o.key(), status, m[1], st)
			}
		default:
			t.Errorf("%s: unexpected status %s", o.key(), status)
		}
	}
	return success
}

// checkFunctionsTarGz checks that POST /v1/functions also takes a tar.gz,
// configured by query parameters.
func checkFunctionsTarGz(t *testing.T, doc jsonObject) {
	t.Helper()
	for _, o := range operations(t, doc) {
		if o.key() != "POST /v1/functions" {
			continue
		}
		content := asObject(asObject(o.op["requestBody"])["content"])
		gz := asObject(asObject(content["application/gzip"])["schema"])
		if gz["type"] != "string" || gz["format"] != "binary" {
			t.Errorf("POST /v1/functions: application/gzip body must be a binary string, got %v", gz)
		}
		var query []string
		for _, p := range asSlice(o.op["parameters"]) {
			if p := deref(t, doc, p); p["in"] == "query" {
				query = append(query, p["name"].(string))
			}
		}
		sort.Strings(query)
		if !slices.Equal(query, []string{"allow", "egress", "env", "keep_alive_s", "max_concurrency", "memory_mib", "name", "refresh", "secret", "strategy", "vcpus", "vmm_pool", "vmm_pool_ttl_s"}) {
			t.Errorf("POST /v1/functions: query parameters %v, want allow, egress, max_concurrency, memory_mib, name, vcpus", query)
		}
	}
}

// checkErrorCodeEnum checks that the error code enum is exactly what the
// API can answer.
func checkErrorCodeEnum(t *testing.T, doc jsonObject, codes map[string]int) {
	t.Helper()
	enum := asSlice(asObject(flatten(t, doc, asObject(flatten(t, doc, schemaByName(t, doc, "Error")).props["error"])).props["code"])["enum"])
	var documented []string
	for _, c := range enum {
		documented = append(documented, c.(string))
	}
	answered := append(keys(codes), "method_not_allowed")
	sort.Strings(documented)
	sort.Strings(answered)
	if !slices.Equal(documented, answered) {
		t.Errorf("Error.error.code enum %v, the API answers %v", documented, answered)
	}
}

func TestOpenAPIEnumsMatchGo(t *testing.T) {
	doc := loadDoc(t)
	enumOf := func(s jsonObject) []string {
		var out []string
		for _, v := range asSlice(deref(t, doc, s)["enum"]) {
			out = append(out, v.(string))
		}
		return out
	}

	var kinds []string
	for _, k := range restore.Kinds() {
		kinds = append(kinds, string(k))
	}
	strategy := schemaByName(t, doc, "Strategy")
	if got := enumOf(strategy); !slices.Equal(got, kinds) || strategy["type"] != "string" {
		t.Errorf("Strategy enum %v, restore.Kinds is %v", got, kinds)
	}
	// Every strategy field in every schema is a Strategy.
	// A function's strategy setting is its own closed set: default, auto
	// or a strategy.
	if got := enumOf(schemaByName(t, doc, "StrategySetting")); !slices.Equal(got, append([]string{"default", wire.StrategyAuto}, kinds...)) {
		t.Errorf("StrategySetting enum %v, want default, auto and %v", got, kinds)
	}
	isStrategy := func(s jsonObject) bool {
		if s["$ref"] == schemaRef("Strategy") || s["$ref"] == schemaRef("StrategySetting") {
			return true
		}
		all := asSlice(s["allOf"])
		return len(all) == 1 && (asObject(all[0])["$ref"] == schemaRef("Strategy") || asObject(all[0])["$ref"] == schemaRef("StrategySetting"))
	}
	for name, s := range asObject(asObject(doc["components"])["schemas"]) {
		for pname, p := range flatten(t, doc, s.(jsonObject)).props {
			if pname == "strategy" && !isStrategy(p) {
				t.Errorf("%s.strategy is not a Strategy", name)
			}
		}
	}
	if items := asObject(flatten(t, doc, schemaByName(t, doc, "Info")).props["strategies"]["items"]); !isStrategy(items) {
		t.Error("Info.strategies items are not Strategy")
	}

	checks := []struct {
		schema, prop string
		want         []string
	}{
		{"VM", "state", []string{catalog.StateBooting, catalog.StateStandby, catalog.StateReady, catalog.StateRunning, catalog.StatePaused, catalog.StateFailed, catalog.StateStopped}},
		{"VM", "accel", []string{string(vmm.AccelKVM), string(vmm.AccelTCG)}},
		{"AccelInfo", "accel", []string{string(vmm.AccelKVM), string(vmm.AccelTCG)}},
		{"Invocation", "mode", []string{"warm", "cold", "pooled", "ready"}},
		{"Operation", "kind", []string{wire.OpBoot, wire.OpPrepare, wire.OpStore, wire.OpCopy, wire.OpPush, wire.OpPull, wire.OpGC, wire.OpDeploy, wire.OpRebuild, wire.OpRefresh}},
		{"Operation", "state", []string{wire.OpRunning, wire.OpSucceeded, wire.OpFailed}},
		{"LogLine", "stream", []string{wire.StreamOutput, wire.StreamKernel}},
	}
	for _, c := range checks {
		got := enumOf(flatten(t, doc, schemaByName(t, doc, c.schema)).props[c.prop])
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%s.%s enum %v, the code uses %v", c.schema, c.prop, got, want)
		}
	}
}

// jsonField is one field as encoding/json sees it.
type jsonField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

func jsonFields(t reflect.Type) []jsonField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []jsonField
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			out = append(out, jsonFields(ft)...) // promoted fields
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out = append(out, jsonField{name, omit, f.Type})
	}
	return out
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// optionalDespiteTag lists request fields without omitempty that the
// server nevertheless does not require (omitempty means nothing when
// decoding).
var optionalDespiteTag = map[string]string{}

// compareSchema checks a schema against the JSON encoding of a Go type:
// the same property names both ways, required = not omitempty, and
// compatible types, recursing into nested structs.
func compareSchema(t *testing.T, doc jsonObject, at string, s jsonObject, typ reflect.Type) {
	t.Helper()
	f := flatten(t, doc, s)
	if f.typ != "object" {
		t.Errorf("%s: schema type %q, want object for %v", at, f.typ, typ)
	}
	fields := jsonFields(typ)
	var goNames, goRequired []string
	for _, fld := range fields {
		goNames = append(goNames, fld.name)
		if !fld.omitempty {
			if _, ok := optionalDespiteTag[at+"."+fld.name]; !ok {
				goRequired = append(goRequired, fld.name)
			}
		}
	}
	if typ == reflect.TypeFor[restore.Stats]() { // each strategy's own stats, under its kind
		for _, st := range restore.Strategies() {
			if st.StatsPart != nil {
				goNames = append(goNames, string(st.Kind))
			}
		}
	}
	sort.Strings(goNames)
	sort.Strings(goRequired)
	if docNames := keys(f.props); !slices.Equal(docNames, goNames) {
		t.Errorf("%s: properties %v, %v encodes %v", at, docNames, typ, goNames)
	}
	if !slices.Equal(f.required, goRequired) {
		t.Errorf("%s: required %v, %v always encodes %v", at, f.required, typ, goRequired)
	}
	for _, fld := range fields {
		if p, ok := f.props[fld.name]; ok {
			compareType(t, doc, at+"."+fld.name, p, fld.typ)
		}
	}
}

func compareType(t *testing.T, doc jsonObject, at string, p jsonObject, typ reflect.Type) {
	t.Helper()
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ == rawType {
		// Any JSON: an inline schema must not constrain the type (a
		// reference says what the raw document always holds).
		if _, isRef := p["$ref"]; !isRef && p["allOf"] == nil && p["type"] != nil {
			t.Errorf("%s: json.RawMessage is any JSON; the schema must not have a type", at)
		}
		return
	}
	f := flatten(t, doc, p)
	want, format := "", ""
	switch {
	case typ == timeType:
		want, format = "string", "date-time"
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
		if typ.Kind() == reflect.Int64 {
			format = "int64"
		}
	case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
		want = "number"
		if typ.Kind() == reflect.Float64 {
			format = "double"
		}
	case typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array:
		want = "array"
	case typ.Kind() == reflect.Map:
		want = "object"
	case typ.Kind() == reflect.Struct:
		// A recursive type (a snapshot's prepare result holds snapshots)
		// is compared once per path.
		if strings.Count(at, "."+typ.Name()) < 2 && strings.Count(at, ".") < 12 {
			compareSchema(t, doc, at, p, typ)
		}
		return
	default:
		t.Errorf("%s: no JSON Schema mapping for %v", at, typ)
		return
	}
	if f.typ != want || (format != "" && f.format != format) {
		t.Errorf("%s: schema %q/%q, %v encodes as %q/%q", at, f.typ, f.format, typ, want, format)
	}
	switch typ.Kind() {
	case reflect.Slice, reflect.Array:
		compareType(t, doc, at+"[]", asObject(deref(t, doc, p)["items"]), typ.Elem())
	case reflect.Map:
		addl, _ := f.addl.(jsonObject)
		if addl == nil {
			t.Errorf("%s: a map needs additionalProperties with a schema", at)
		} else {
			compareType(t, doc, at+"{}", addl, typ.Elem())
		}
	}
}

func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	doc := loadDoc(t)
	for _, c := range schemaGoTypes() {
		compareSchema(t, doc, c.schema, schemaByName(t, doc, c.schema), c.typ)
	}

	// Snapshot.prepared is raw JSON that always holds a prepare result.
	prepared, _ := asObject(schemaByName(t, doc, "Snapshot")["properties"])["prepared"].(jsonObject)
	if all := asSlice(prepared["allOf"]); len(all) != 1 || asObject(all[0])["$ref"] != schemaRef("PrepareResult") {
		t.Error("Snapshot.prepared must reference PrepareResult")
	}

	// Request bodies are decoded with DisallowUnknownFields.
	for _, name := range []string{"CreateFunctionRequest", "InvokeRequest", "CreateVMRequest", "CreateSnapshotRequest", "PrepareRequest", "SetSecretRequest", "RestoreSettings", "RefreshRequest"} {
		if schemaByName(t, doc, name)["additionalProperties"] != false {
			t.Errorf("%s: unknown fields are 400, so additionalProperties must be false", name)
		}
	}
	// Collections are pages: {"items": [...], "next": cursor} (wire.List).
	for name, item := range map[string]string{"FunctionList": "Function", "VMList": "VM",
		"SnapshotList": "Snapshot", "InvocationList": "InvocationRecord", "OperationList": "Operation", "SecretList": "Secret"} {
		f := flatten(t, doc, schemaByName(t, doc, name))
		items := f.props["items"]
		if !slices.Equal(keys(f.props), []string{"items", "next"}) || !slices.Equal(f.required, []string{"items"}) ||
			items["type"] != "array" || asObject(items["items"])["$ref"] != schemaRef(item) || f.props["next"]["type"] != "string" {
			t.Errorf("%s must be {items: [%s], next}, items required", name, item)
		}
	}
	// The raw JSON fields are any JSON, without a type.
	for _, at := range [][2]string{{"Invocation", "result"}, {"InvokeRequest", "event"}, {"PrepareRequest", "record_event"}} {
		p := schemaByName(t, doc, at[0])["properties"].(jsonObject)[at[1]].(jsonObject)
		for _, k := range []string{"type", "$ref", "allOf", "oneOf", "anyOf"} {
			if _, ok := p[k]; ok {
				t.Errorf("%s.%s is any JSON and must not have %q", at[0], at[1], k)
			}
		}
	}
}

// schemaGoType is a schema of the document and the Go type it describes.
type schemaGoType struct {
	schema string
	typ    reflect.Type
}

// schemaGoTypes are the answers' and the requests' schemas with their Go
// types.
func schemaGoTypes() []schemaGoType { return append(answerSchemas(), requestSchemas()...) }

// answerSchemas are the schemas of answers with their Go types.
func answerSchemas() []schemaGoType {
	return []schemaGoType{
		{"Function", reflect.TypeFor[wire.Function]()},
		{"VM", reflect.TypeFor[wire.VM]()},
		{"CreatedVM", reflect.TypeFor[wire.VM]()},
		{"Snapshot", reflect.TypeFor[wire.Snapshot]()},
		{"Invocation", reflect.TypeFor[daemon.Invocation]()},
		{"InvocationError", reflect.TypeFor[agent.Error]()},
		{"Timing", reflect.TypeFor[daemon.Timing]()},
		{"RestoreTiming", reflect.TypeFor[daemon.RestoreTiming]()},
		{"InvocationRecord", reflect.TypeFor[wire.InvocationRecord]()},
		{"Info", reflect.TypeFor[daemon.Info]()},
		{"AccelInfo", reflect.TypeFor[daemon.AccelInfo]()},
		{"GuestImage", reflect.TypeFor[wire.GuestImage]()},
		{"GuestImageFile", reflect.TypeFor[wire.GuestImageFile]()},
		{"Error", reflect.TypeFor[ErrorBody]()},
		{"StrategyStats", reflect.TypeFor[restore.Stats]()},
		{"ProcessCounters", reflect.TypeFor[procstat.Counters]()},
		{"PrepareResult", reflect.TypeFor[daemon.PrepareResult]()},
		{"FaaSnapBuild", reflect.TypeFor[restore.FaaSnapBuild]()},
		{"FreePageReporting", reflect.TypeFor[restore.FreePageReporting]()},
		{"SnapBPFBuild", reflect.TypeFor[restore.SnapBPFBuild]()},
		{"PreparedStrategy", reflect.TypeFor[wire.PreparedStrategy]()},
		{"CachedStats", reflect.TypeFor[restore.CachedStats]()},
		{"REAPStats", reflect.TypeFor[restore.REAPStats]()},
		{"FaaSnapStats", reflect.TypeFor[restore.FaaSnapStats]()},
		{"PremapStats", reflect.TypeFor[restore.PremapStats]()},
		{"SnapBPFStats", reflect.TypeFor[restore.SnapBPFStats]()},
		{"StrategyDescription", reflect.TypeFor[wire.StrategyDescription]()},
		{"StrategyArtifact", reflect.TypeFor[wire.StrategyArtifact]()},
		{"Measure", reflect.TypeFor[wire.Measure]()},
		{"LoadingSetStats", reflect.TypeFor[memlayout.LoadingSetStats]()},
		{"REAPBuild", reflect.TypeFor[restore.REAPBuild]()},
		{"PrepareTiming", reflect.TypeFor[wire.PrepareTiming]()},
		{"StoreEntry", reflect.TypeFor[store.Entry]()},
		{"StoreInfo", reflect.TypeFor[daemon.StoreInfo]()},
		{"SnapshotMemory", reflect.TypeFor[daemon.SnapshotMemory]()},
		{"VMMemory", reflect.TypeFor[daemon.VMMemory]()},
		{"Operation", reflect.TypeFor[wire.Operation]()},
		{"ErrorDetail", reflect.TypeFor[wire.ErrorDetail]()},
		{"PushResult", reflect.TypeFor[wire.PushResult]()},
		{"PullResult", reflect.TypeFor[wire.PullResult]()},
		{"Version", reflect.TypeFor[wire.Version]()},
		{"Alias", reflect.TypeFor[wire.Alias]()},
		{"Route", reflect.TypeFor[wire.Route]()},
		{"Rollback", reflect.TypeFor[wire.Rollback]()},
		{"Deploy", reflect.TypeFor[wire.Deploy]()},
		{"DeployTiming", reflect.TypeFor[wire.DeployTiming]()},
		{"BuildNote", reflect.TypeFor[wire.BuildNote]()},
		{"Secret", reflect.TypeFor[wire.Secret]()},
		{"RunningInvocation", reflect.TypeFor[wire.RunningInvocation]()},
		{"FunctionDeletion", reflect.TypeFor[wire.FunctionDeletion]()},
		{"DeletedVM", reflect.TypeFor[wire.DeletedVM]()},
		{"DeletedSnapshot", reflect.TypeFor[wire.DeletedSnapshot]()},
		{"Endpoint", reflect.TypeFor[wire.Endpoint]()},
		{"AsyncConfig", reflect.TypeFor[wire.AsyncConfig]()},
		{"AsyncAccepted", reflect.TypeFor[wire.AsyncAccepted]()},
		{"AsyncInvocation", reflect.TypeFor[wire.AsyncInvocation]()},
		{"Outcome", reflect.TypeFor[wire.Outcome]()},
		{"DeadLetter", reflect.TypeFor[wire.DeadLetter]()},
		{"PurgeResult", reflect.TypeFor[wire.PurgeResult]()},
		{"Schedule", reflect.TypeFor[wire.Schedule]()},
		{"FunctionRestore", reflect.TypeFor[wire.FunctionRestore]()},
		{"RestoreVersion", reflect.TypeFor[wire.RestoreVersion]()},
		{"RestoreLocation", reflect.TypeFor[wire.RestoreLocation]()},
		{"StrategyEvidence", reflect.TypeFor[wire.StrategyEvidence]()},
		{"DriftState", reflect.TypeFor[wire.DriftState]()},
		{"WorkingSetRefresh", reflect.TypeFor[wire.WorkingSetRefresh]()},
		{"RefreshedSet", reflect.TypeFor[wire.RefreshedSet]()},
		{"BackgroundPrepare", reflect.TypeFor[wire.BackgroundPrepare]()},
		{"StrategyChoice", reflect.TypeFor[wire.StrategyChoice]()},
		{"InvocationLogs", reflect.TypeFor[wire.InvocationLogs]()},
		{"LogLine", reflect.TypeFor[wire.LogLine]()},
		{"LogPage", reflect.TypeFor[wire.LogPage]()},
	}
}

// requestSchemas are the schemas of request bodies with their Go types.
func requestSchemas() []schemaGoType {
	return []schemaGoType{
		{"CreateFunctionRequest", reflect.TypeFor[wire.CreateFunctionRequest]()},
		{"InvokeRequest", reflect.TypeFor[wire.InvokeRequest]()},
		{"CreateVMRequest", reflect.TypeFor[wire.CreateVMRequest]()},
		{"CreateSnapshotRequest", reflect.TypeFor[wire.CreateSnapshotRequest]()},
		{"PrepareRequest", reflect.TypeFor[wire.PrepareRequest]()},
		{"PullRequest", reflect.TypeFor[wire.PullRequest]()},
		{"AliasRequest", reflect.TypeFor[wire.AliasRequest]()},
		{"RollbackRequest", reflect.TypeFor[wire.RollbackRequest]()},
		{"DeployRequest", reflect.TypeFor[wire.DeployRequest]()},
		{"SetSecretRequest", reflect.TypeFor[wire.SetSecretRequest]()},
		{"CreateEndpointRequest", reflect.TypeFor[wire.CreateEndpointRequest]()},
		{"AsyncConfigRequest", reflect.TypeFor[wire.AsyncConfigRequest]()},
		{"CreateScheduleRequest", reflect.TypeFor[wire.CreateScheduleRequest]()},
		{"RestoreSettings", reflect.TypeFor[wire.RestoreSettings]()},
		{"RefreshRequest", reflect.TypeFor[wire.RefreshRequest]()},
	}
}

// checker is the document loaded and validated by kin-openapi (examples
// included).
func checker(t *testing.T) *apitest.Checker {
	t.Helper()
	c, err := apitest.Load(OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// validateGo checks v, as encoding/json sends it, against a schema.
func validateGo(t *testing.T, c *apitest.Checker, schema string, v any) {
	t.Helper()
	if err := c.CheckValue(schema, v); err != nil {
		t.Error(err)
	}
}

// realDocs are documents as the daemon makes them, of each kind the API
// answers with.
type realDocs struct {
	now                          time.Time
	hex64                        string
	fn                           *catalog.Function
	booted, restored, failed     *catalog.VM
	snap, warmSnap, preparedSnap *catalog.Snapshot
	rt                           *daemon.RestoreTiming
	warm, cold, raised, warmProc *daemon.Invocation
	strategic                    []*daemon.Invocation
	record                       *catalog.Invocation
	prep                         *daemon.PrepareResult
	info                         daemon.Info
}

func newRealDocs(t *testing.T) *realDocs {
	now := time.Now()
	hex64 := strings.Repeat("ab12", 16)
	fn := &catalog.Function{Name: "hello", Digest: hex64, CodeDir: "/var/lib/thaw/functions/hello/code",
		Disk: "/var/lib/thaw/functions/hello/code.ext4", MemoryMiB: 512, VCPUs: 1, CreatedAt: now,
		Network: catalog.Network{Egress: "services", Services: []string{"127.0.0.1:6379"}}}
	booted := &catalog.VM{ID: "vm-0123456789ab", Function: "hello", State: catalog.StateRunning, PID: 4242,
		RunDir: "/var/lib/thaw/run/vm-0123456789ab", Accel: "kvm", MemoryMiB: 512, BootMS: 812.25,
		CreatedAt: now, UpdatedAt: now}
	restored := &catalog.VM{ID: "vm-ba9876543210", Function: "hello", State: catalog.StateRunning, PID: 4343,
		RunDir: "/var/lib/thaw/run/vm-ba9876543210", Snapshot: "snap-00112233aabb", Strategy: "vanilla",
		Accel: "tcg", MemoryMiB: 512, CreatedAt: now, UpdatedAt: now}
	failed := &catalog.VM{ID: "vm-ffffffffffff", Function: "hello", State: catalog.StateFailed,
		Reason: "qemu process gone when the daemon restarted", RunDir: "/x", Accel: "kvm", MemoryMiB: 128}
	snap := &catalog.Snapshot{ID: "snap-00112233aabb", Function: "hello", SourceVM: booted.ID, Dir: "/s",
		MemoryMiB: 512, SizeBytes: 536870912 + 40000, DiskBytes: 31457280, Stamp: `{"x":1}`, CreateMS: 410.5,
		PauseMS: 401.2, CreatedAt: now.UTC()}
	rt := &daemon.RestoreTiming{VerifyMS: 1.5, VMMStartMS: 40, LoadStateMS: 20.25, SetupMS: 62, ResumeMS: 4.75, VMM: "started"}
	warm := &daemon.Invocation{ID: "inv-0123456789ab", Function: "hello", VM: booted.ID, Mode: "warm", OK: true,
		Result: json.RawMessage(`{"message":"hello, world!"}`), Timing: daemon.Timing{InvokeMS: 1.2, GuestMS: 0.03, TotalMS: 1.3}}
	cold := &daemon.Invocation{ID: "inv-0123456789ac", Function: "hello", VM: restored.ID, Mode: "cold",
		Snapshot: snap.ID, Strategy: "vanilla", OK: true, Result: json.RawMessage(`null`),
		Timing: daemon.Timing{Restore: rt, InvokeMS: 3, GuestMS: 0.1, TotalMS: 70, TeardownMS: 12}}
	raised := &daemon.Invocation{ID: "inv-0123456789ad", Function: "fail", VM: booted.ID, Mode: "warm",
		Error:  &agent.Error{Type: "ValueError", Message: "boom: None", Traceback: "Traceback ..."},
		Timing: daemon.Timing{InvokeMS: 2, GuestMS: 0.5, TotalMS: 2.1}}
	detail, _ := json.Marshal(cold)
	record := &catalog.Invocation{ID: cold.ID, Function: "hello", VM: cold.VM, Snapshot: cold.Snapshot,
		Strategy: cold.Strategy, OK: true, Detail: detail, CreatedAt: now}
	proc := &procstat.Counters{MinorFaults: 9214, MajorFaults: 311, ReadBytes: 41943040, RssAnonKiB: 21504, RssFileKiB: 118784}
	warmProc := *warm
	warmProc.Process = proc
	d := &realDocs{now: now, hex64: hex64, fn: fn, booted: booted, restored: restored, failed: failed, snap: snap,
		rt: rt, warm: warm, cold: cold, raised: raised, warmProc: &warmProc, record: record}
	d.strategic = strategicInvocations(cold, proc)
	d.prep, d.warmSnap, d.preparedSnap = preparedDocs(t, snap, restored)
	d.info = realInfo(hex64)
	return d
}

// strategicInvocations are cold invocations with what each strategy
// reports.
func strategicInvocations(cold *daemon.Invocation, proc *procstat.Counters) []*daemon.Invocation {
	finished := true
	// What each strategy reports (a fallback runs as vanilla).
	stats := []struct {
		kind restore.Kind
		st   restore.Stats
	}{
		{restore.Vanilla, restore.Stats{}},
		{restore.Vanilla, restore.Stats{Fallback: "faasnap artifacts unusable, restored with vanilla: no such file"}},
		{restore.Cached, part(restore.Stats{}, restore.Cached, restore.CachedStats{CacheFillMS: 120.5})},
		{restore.REAP, part(restore.Stats{DaemonReadBytes: 17555456, ServedFaults: 412, FetchMS: 9.5, FetchBytes: 15867904}, restore.REAP,
			restore.REAPStats{PrefetchPages: 3874, PrefetchBytes: 15867904, PrefetchMS: 9.5, FaultsServed: 412, FaultBytesRead: 1687552, PrefetchDirectIO: true})},
		{restore.FaaSnap, part(restore.Stats{LayoutEntries: 412}, restore.FaaSnap, restore.FaaSnapStats{LoaderBytes: 18874368,
			LoaderMS: 52.7, LoaderShared: true, LoaderBeforeInvoke: &finished})},
		{restore.REAP, restore.Stats{RecordedPageCount: 7342}}, // record mode (never answered, but encodable)
		{restore.Vanilla, restore.Stats{LazyStats: restore.LazyStats{Lazy: true, SourceFaults: 5120, SourceBytes: 20971520,
			SourceReadMS: 310.5, SourceFetchedBytes: 41943040, SourceFetchedChunks: 80, SourceCacheHits: 5040}}},
		{restore.REAP, part(restore.Stats{LazyStats: restore.LazyStats{Lazy: true, SourceFaults: 412,
			SourceBytes: 1687552, SourceReadMS: 40.2, SourceFetchedBytes: 3145728, SourceFetchedChunks: 6, SourceCacheHits: 406}}, restore.REAP,
			restore.REAPStats{PrefetchPages: 3874, PrefetchBytes: 15867904, PrefetchMS: 9.5, FaultsServed: 412, FaultBytesRead: 1687552})},
		{restore.FaaSnap, part(restore.Stats{LayoutEntries: 206, LazyStats: restore.LazyStats{Lazy: true, SourceFaults: 301,
			SourceBytes: 1232896, SourceReadMS: 25.5, SourceFetchedBytes: 2621440, SourceFetchedChunks: 5, SourceCacheHits: 296,
			LoadingSetFaults: 12, ZeroFaults: 2831, LoaderPages: 4499, LoaderExisting: 12}}, restore.FaaSnap,
			restore.FaaSnapStats{LoaderBytes: 18477056, LoaderMS: 40.1, LoaderBeforeInvoke: &finished})},
		{restore.Premap, part(restore.Stats{LayoutEntries: 31}, restore.Premap, restore.PremapStats{StoreBytes: 94371840,
			PopulatedBytes: 536870912, PopulateMS: 21.4})},
		{restore.SnapBPF, part(restore.Stats{}, restore.SnapBPF, restore.SnapBPFStats{SnapBPFRanges: 96, SnapBPFPages: 22424,
			SnapBPFReadaheadCalls: 120, SnapBPFIssueMS: 3.1, SnapBPFResidentPages: 22424, SnapBPFResidentMS: 88.5})},
	}
	var strategic []*daemon.Invocation
	for i, c := range stats {
		inv := *cold
		inv.Strategy, inv.EvictedCache, inv.Process = string(c.kind), i%2 == 0, proc
		inv.StrategyStats = &c.st
		strategic = append(strategic, &inv)
	}
	return strategic
}

// preparedDocs are a prepare's result, the warm snapshot it took, and that
// snapshot with the result recorded.
func preparedDocs(t *testing.T, snap *catalog.Snapshot, restored *catalog.VM) (*daemon.PrepareResult, *catalog.Snapshot, *catalog.Snapshot) {
	warmSnap := *snap
	warmSnap.ID, warmSnap.SourceVM, warmSnap.Parent = "snap-99887766aabb", restored.ID, snap.ID
	prep := &daemon.PrepareResult{Function: "hello", Clean: daemon.SnapshotBody(snap), Warm: daemon.SnapshotBody(&warmSnap),
		Prepared: map[string]*wire.PreparedStrategy{
			"faasnap": {RecordMS: 2901, BuildMS: 311, Build: mustJSON(t, restore.FaaSnapBuild{Scans: 9, WorkingSetPages: 7342,
				Stats: memlayout.LoadingSetStats{WorkingSetPages: 7342, LoadingSetPages: 4511, ZeroPagesInWorkingSet: 2831,
					GapPages: 97, RegionsBeforeMerge: 388, RegionsAfterMerge: 206},
				LoadingSetBytes: 18874368, GroupSize: 1024, MergeGap: 32,
				FreedPages: restore.FreePageReporting{WaitMS: 2612.4, NonzeroBefore: 4790, NonzeroAfter: 4511, PagesRemoved: 279}})},
			"reap": {RecordMS: 96, BuildMS: 38, Build: mustJSON(t, restore.REAPBuild{FaultedPages: 3874, WorkingSetBytes: 15867904})},
			"snapbpf": {RecordMS: 1300, BuildMS: 12, Build: mustJSON(t, restore.SnapBPFBuild{Events: 2210, CapturedPages: 31544, FreePagesFiltered: 9120,
				PrefetchPages: 22424, Ranges: 96, REAPOverlapPages: 3641, CaptureMS: 1210.4})}},
		Timing: wire.PrepareTiming{BootMS: 812, CleanSnapshotMS: 402, WarmSnapshotMS: 401, TotalMS: 4971}}
	preparedSnap := warmSnap
	preparedSnap.Prepared, _ = json.Marshal(prep)
	return prep, &warmSnap, &preparedSnap
}

func realInfo(hex64 string) daemon.Info {
	var kinds []string
	for _, k := range restore.Kinds() {
		kinds = append(kinds, string(k))
	}
	var details []wire.StrategyDescription
	for _, st := range restore.Strategies() {
		details = append(details, st.Describe())
	}
	info := daemon.Info{Version: "v0.1.0-42-g1a2b3c4", APIVersion: daemon.APIVersion, StrategyDetails: details,
		Accel: daemon.AccelInfo{Accel: string(vmm.AccelKVM), Source: "cached-probe", Detail: "kvm probe: booted in 210 ms"},
		VMM:   wire.VMMInfo{Name: "qemu", Version: "8.2.2", Machine: "pc-q35-8.2"},
		Image: wire.GuestImage{Dir: "/img/abc", Format: 1, Hash: "abc", KernelVersion: "6.8.0", Cmdline: "console=ttyS0",
			Files:   map[string]wire.GuestImageFile{guestimage.Kernel: {Size: 14000000, SHA256: hex64}, guestimage.Initrd: {Size: 1, SHA256: hex64}},
			BuiltAt: "2025-01-01T00:00:00Z"},
		DataDir: "/var/lib/thaw", Strategies: kinds}
	return info
}

func TestOpenAPIValidatesRealDocuments(t *testing.T) {
	c := checker(t)
	d := newRealDocs(t)
	validateFunctionDocs(t, c, d)
	validateVMAndSnapshotDocs(t, c, d)
	validateInvocationDocs(t, c, d)
	entry := validateStoreDocs(t, c, d)
	validateRequestDocs(t, c, d)
	validateOperationDocs(t, c, d, entry)
}

func validateFunctionDocs(t *testing.T, c *apitest.Checker, d *realDocs) {
	fn, hex64, now := d.fn, d.hex64, d.now
	validateGo(t, c, "Function", FunctionBody(fn))
	validateGo(t, c, "FunctionList", wire.List[*wire.Function]{Items: Bodies([]*catalog.Function{fn}, FunctionBody)})
	validateGo(t, c, "FunctionList", wire.List[*wire.Function]{Items: Bodies[*catalog.Function](nil, FunctionBody)})
	configured := *fn
	configured.Env, configured.Secrets = map[string]string{"GREETING": "hello", "EMPTY": ""}, map[string]string{"DB_PASSWORD": "db-password"}
	validateGo(t, c, "Function", FunctionBody(&configured))
	validateGo(t, c, "CreateFunctionRequest", wire.CreateFunctionRequest{Name: "hello", Directory: "/src/hello", Env: configured.Env, Secrets: configured.Secrets})
	secret := daemon.SecretInfo{Name: "db-password", Version: 3, Digest: hex64, CreatedAt: now, UpdatedAt: now}
	validateGo(t, c, "Secret", SecretBody(secret))
	validateGo(t, c, "SecretList", wire.List[wire.Secret]{Items: Bodies([]daemon.SecretInfo{secret}, SecretBody)})
	validateGo(t, c, "SetSecretRequest", wire.SetSecretRequest{Value: "correct horse battery staple"})
	if err := c.CheckValue("SetSecretRequest", wire.SetSecretRequest{Value: "short"}); err == nil {
		t.Error("a value under 8 bytes passed")
	}
}

func validateVMAndSnapshotDocs(t *testing.T, c *apitest.Checker, d *realDocs) {
	booted, restored, failed, warm, raised, now := d.booted, d.restored, d.failed, d.warm, d.raised, d.now
	snap, warmSnap, preparedSnap, rt := d.snap, *d.warmSnap, *d.preparedSnap, d.rt
	for _, v := range []*catalog.VM{booted, restored, failed} {
		validateGo(t, c, "VM", vmBody(v))
	}
	ready := *restored
	ready.State, ready.ReadyMiB = catalog.StateReady, 39
	if b := vmBody(&ready); b.ReadyMemoryMiB != 39 {
		t.Errorf("a ready clone's body counts %d MiB, want 39", b.ReadyMemoryMiB)
	}
	validateGo(t, c, "VM", vmBody(&ready))
	busy := vmBody(booted)
	busy.Invocation = &wire.RunningInvocation{ID: warm.ID, StartedAt: now, RunningMS: 12034.5, TimeoutMS: 600000}
	validateGo(t, c, "VM", busy)
	validateGo(t, c, "FunctionDeletion", &wire.FunctionDeletion{Function: "hello", VMs: []wire.DeletedVM{
		{ID: booted.ID, State: catalog.StateRunning, Invocation: warm.ID}, {ID: restored.ID, State: catalog.StateRunning, Kept: true},
		{ID: "vm-0123456789cd", State: catalog.StateStandby}, {ID: failed.ID, State: catalog.StateFailed}},
		Snapshots: []wire.DeletedSnapshot{{ID: snap.ID, Pinned: true, Stored: true}, {ID: warmSnap.ID, Version: 2}},
		Versions:  []int{1, 2}, Aliases: []string{"live"}, CodeDirs: 2, MS: 812.5})
	validateGo(t, c, "FunctionDeletion", &wire.FunctionDeletion{Function: "hello", VMs: []wire.DeletedVM{},
		Snapshots: []wire.DeletedSnapshot{}, Versions: []int{}, Aliases: []string{}, CodeDirs: 1, MS: 3})
	deleted := *raised
	deleted.Error = &agent.Error{Type: daemon.VMDeletedError, Message: "vm vm-0123456789ab deleted with force"}
	validateGo(t, c, "Invocation", &deleted)
	validateGo(t, c, "VMList", wire.List[*wire.VM]{Items: Bodies([]*catalog.VM{booted, failed}, vmBody)})
	validateGo(t, c, "CreatedVM", vmBody(booted))
	validateGo(t, c, "CreatedVM", daemon.VMBody(restored, rt))
	validateGo(t, c, "Snapshot", daemon.SnapshotBody(snap))
	validateGo(t, c, "Snapshot", daemon.SnapshotBody(&preparedSnap))
	validateGo(t, c, "SnapshotList", wire.List[*wire.Snapshot]{Items: Bodies([]*catalog.Snapshot{snap, &preparedSnap}, daemon.SnapshotBody)})
}

func validateInvocationDocs(t *testing.T, c *apitest.Checker, d *realDocs) {
	prep, warm, cold, raised, warmProc, strategic, record := d.prep, d.warm, d.cold, d.raised, *d.warmProc, d.strategic, d.record
	validateGo(t, c, "PrepareResult", prep)
	noCapture := *prep
	noCapture.Prepared = maps.Clone(prep.Prepared)
	noCapture.Prepared["snapbpf"] = &wire.PreparedStrategy{Unavailable: "snapbpf capture unavailable: no tracefs"}
	validateGo(t, c, "PrepareResult", &noCapture)
	for _, inv := range append([]*daemon.Invocation{warm, cold, raised, &warmProc}, strategic...) {
		validateGo(t, c, "Invocation", inv)
	}
	validateGo(t, c, "InvocationRecord", daemon.InvocationRecordBody(record))
}

func validateStoreDocs(t *testing.T, c *apitest.Checker, d *realDocs) store.Entry {
	snap, hex64, restored := d.snap, d.hex64, d.restored
	entry := store.Entry{Snapshot: snap.ID, Path: "/dev/shm/thaw-store/0a1b2c3d4e5f/" + snap.ID + ".mem", Size: 536870912,
		SHA256: hex64, Bytes: 94371840, Regions: 31, StoredMS: 80.2, StoredAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	validateGo(t, c, "StoreEntry", entry)
	validateGo(t, c, "StoreInfo", daemon.StoreInfo{Available: true, Dir: "/dev/shm/thaw-store/0a1b2c3d4e5f", Kind: string(store.TmpFS),
		CapacityBytes: 1 << 34, FreeBytes: 1 << 33, UsedBytes: entry.Bytes, Entries: []store.Entry{entry}})
	validateGo(t, c, "StoreInfo", daemon.StoreInfo{Error: "no memory store directory is configured", Entries: []store.Entry{}})
	validateGo(t, c, "SnapshotMemory", daemon.SnapshotMemory{Snapshot: snap.ID, PageCacheBytes: 8192,
		Files: map[string]int64{"memory.bin": 4096, "strategies/faasnap/loadingset.bin": 4096}, StoreBytes: entry.Bytes})
	validateGo(t, c, "VMMemory", daemon.VMMemory{VM: restored.ID, ProcessMemory: procstat.Memory{RSSBytes: 1 << 27, PSSBytes: 1 << 26,
		AnonBytes: 1 << 25, FileBytes: 1 << 24, ShmemBytes: 1 << 25, PrivateDirty: 1 << 25}})
	return entry
}

func validateRequestDocs(t *testing.T, c *apitest.Checker, d *realDocs) {
	record, info, snap, booted := d.record, d.info, d.snap, d.booted
	validateGo(t, c, "InvocationList", wire.List[*wire.InvocationRecord]{Items: Bodies([]*catalog.Invocation{record}, daemon.InvocationRecordBody)})
	validateGo(t, c, "Info", info)
	validateGo(t, c, "CreateFunctionRequest", wire.CreateFunctionRequest{Name: "hello", Directory: "/src/hello"})
	validateGo(t, c, "CreateFunctionRequest", wire.CreateFunctionRequest{Name: "hello", Directory: "/src/hello", MemoryMiB: 256, VCPUs: 2})
	validateGo(t, c, "InvokeRequest", wire.InvokeRequest{})
	validateGo(t, c, "InvokeRequest", wire.InvokeRequest{Event: json.RawMessage(`[1,"two"]`), TimeoutMS: 5000, Strategy: "vanilla", Snapshot: snap.ID})
	for _, k := range restore.Kinds() {
		validateGo(t, c, "InvokeRequest", wire.InvokeRequest{Strategy: string(k), EvictCache: true})
	}
	validateGo(t, c, "PrepareRequest", wire.PrepareRequest{})
	validateGo(t, c, "PrepareRequest", wire.PrepareRequest{RecordEvent: json.RawMessage(`{"n":3}`), GroupSize: 512, MergeGap: 16, TimeoutMS: 60000})
	validateGo(t, c, "CreateVMRequest", wire.CreateVMRequest{Function: "hello"})
	validateGo(t, c, "CreateVMRequest", wire.CreateVMRequest{Snapshot: snap.ID, Strategy: "vanilla"})
	validateGo(t, c, "CreateSnapshotRequest", wire.CreateSnapshotRequest{VM: booted.ID})
}

// validateOperationDocs checks operations: running, succeeded with each
// kind's result, failed.
func validateOperationDocs(t *testing.T, c *apitest.Checker, d *realDocs, entry store.Entry) {
	prep, booted, snap, now := d.prep, d.booted, d.snap, d.now
	running := &daemon.Operation{Operation: wire.Operation{ID: "op-0123456789ab", Kind: wire.OpPrepare, Target: "hello",
		State: wire.OpRunning, Progress: wire.OperationProgress{Phase: "record faasnap", Done: 0, Total: 3, Unit: "strategies"},
		CreatedAt: now, UpdatedAt: now}}
	validateGo(t, c, "Operation", operationBody(running))
	for _, res := range []*wire.OperationResult{{VM: vmBody(booted)}, {Prepare: prep}, {Store: &entry}, {Snapshot: daemon.SnapshotBody(snap)}} {
		ok := *running
		ok.State, ok.Result, ok.Progress = wire.OpSucceeded, res, wire.OperationProgress{Phase: "done"}
		validateGo(t, c, "Operation", operationBody(&ok))
	}
	bad := *running
	bad.State, bad.Err, bad.RequestID = wire.OpFailed, fmt.Errorf("%w: vm vm-0123456789ab: qemu exited", daemon.ErrVMFailed), "req-0011223344556677"
	body := operationBody(&bad)
	if body.Error == nil || body.Error.Status != 502 || body.Error.Code != "vm_failed" || body.Error.RequestID != bad.RequestID {
		t.Errorf("failed operation's error: %+v", body.Error)
	}
	validateGo(t, c, "Operation", body)
	validateGo(t, c, "OperationList", wire.List[*wire.Operation]{Items: Bodies([]*daemon.Operation{running, &bad}, operationBody)})
	broken := *body
	broken.State = "finished"
	if err := c.CheckValue("Operation", broken); err == nil {
		t.Error("an operation in an undocumented state passed")
	}
}

func TestServeOpenAPIAndUnknownRoutes(t *testing.T) {
	ch := checker(t)
	h := newTestHandler()
	serve := func(method, target string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, localRequest(method, target, "", ""))
		return w
	}

	w := serve("GET", "/v1/openapi.json")
	if w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		t.Fatalf("GET /v1/openapi.json: %d %q", w.Code, w.Header().Get("Content-Type"))
	}
	if !bytes.Equal(w.Body.Bytes(), OpenAPI) {
		t.Error("GET /v1/openapi.json does not serve the embedded document")
	}

	for _, c := range []struct {
		method, target string
		status         int
		code           string
	}{
		{"GET", "/v1/nope", http.StatusNotFound, "not_found"},
		{"GET", "/", http.StatusNotFound, "not_found"},
		{"GET", "/v1/functions/hello/nope", http.StatusNotFound, "not_found"},
		{"GET", "/v1/functions/", http.StatusNotFound, "not_found"},
		{"DELETE", "/v1/info", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"POST", "/v1/openapi.json", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"PUT", "/v1/functions", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"GET", "/v1/vms/vm-0123456789ab/invoke", http.StatusMethodNotAllowed, "method_not_allowed"},
		{"PATCH", "/v1/snapshots/snap-0123456789ab", http.StatusMethodNotAllowed, "method_not_allowed"},
	} {
		w := serve(c.method, c.target)
		if w.Code != c.status || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %q, want %d application/json", c.method, c.target, w.Code, w.Header().Get("Content-Type"), c.status)
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(w.Body.Bytes()))
		dec.DisallowUnknownFields()
		var b ErrorBody
		if err := dec.Decode(&b); err != nil || b.Error.Code != c.code || b.Error.Message == "" {
			t.Errorf("%s %s: body %q (%v), want an Error with code %q", c.method, c.target, w.Body, err, c.code)
		}
		var x any
		_ = json.Unmarshal(w.Body.Bytes(), &x)
		validateGo(t, ch, "Error", x)
	}
}

// part is st with the strategy's own stats v under kind, as a restore
// reports them.
func part(st restore.Stats, kind restore.Kind, v any) restore.Stats {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	st.Kind, st.Part = string(kind), b
	return st
}

func mustJSON(t *testing.T, v any) json.RawMessage {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// noDaemon serves every family's routes (routing, guard and document
// tests) from a daemon none of whose methods is called, but for the host's
// metrics, which a request records.
func noDaemon() Services {
	var d *daemon.Service
	host := testHost{metrics.New(func() metrics.State { return metrics.State{} })}
	return Services{d, d, d, d, d, d, d, d, host}
}

// testHost is a daemon's self-description with metrics of its own.
type testHost struct{ set *metrics.Set }

func (h testHost) Info() daemon.Info     { return daemon.Info{} }
func (h testHost) Metrics() *metrics.Set { return h.set }
