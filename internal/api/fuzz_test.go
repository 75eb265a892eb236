package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/wire"
)

// requestDecoders are the handlers' decoding steps (everything a handler
// does before it calls the service), by route. Routes not listed read
// nothing from the request but their path.
var requestDecoders = map[string]func(http.ResponseWriter, *http.Request) error{
	"POST /v1/functions":                       decodes(readCreateFunction),
	"POST /v1/functions/{name}/invoke":         decodes(readInvokeFunction),
	"POST /v1/snapshots/{id}/invoke":           decodes(readInvokeSnapshot),
	"POST /v1/vms/{id}/invoke":                 decodes(readInvokeVM),
	"POST /v1/functions/{name}/prepare":        decodes(readPrepare),
	"POST /v1/vms":                             decodes(readCreateVM),
	"POST /v1/snapshots":                       decodes(readCreateSnapshot),
	"POST /v1/snapshots/pull":                  decodes(readWaiting(readSmallBody[wire.PullRequest])),
	"POST /v1/registry/gc":                     decodes(readWaiting(readSmallBody[wire.GCRequest])),
	"POST /v1/functions/{name}/deploy":         decodes(readWaiting(readDeploy)),
	"POST /v1/functions/{name}/rollback":       decodes(readRollback),
	"PUT /v1/functions/{name}/aliases/{alias}": decodes(readSetAlias),
	"PUT /v1/secrets/{name}":                   decodes(readSetSecret),
	"POST /v1/endpoints":                       decodes(readSmallBody[wire.CreateEndpointRequest]),
	"PUT /v1/functions/{name}/async":           decodes(readSmallBody[wire.AsyncConfigRequest]),
	"POST /v1/schedules":                       decodes(readSmallBody[wire.CreateScheduleRequest]),
	"PUT /v1/functions/{name}/restore":         decodes(readSmallBody[wire.RestoreSettings]),
	"POST /v1/functions/{name}/refresh":        decodes(readWaiting(readRefresh)),
	"GET /v1/invocations": func(w http.ResponseWriter, r *http.Request) error {
		_, _, _, err := readListInvocations(r)
		return err
	},
}

// decodes adapts a handler's decoding step to requestDecoders, dropping
// what it decoded.
func decodes[T any](read func(http.ResponseWriter, *http.Request) (T, error)) func(http.ResponseWriter, *http.Request) error {
	return func(w http.ResponseWriter, r *http.Request) error {
		_, err := read(w, r)
		return err
	}
}

// decoded is the status a decoding handler answers when the request got
// through: the service would be called next.
const decoded = 299

// decodingHandler is the real guard and routing with every route cut
// after its decoding step.
func decodingHandler() *Handler {
	h := NewServices(noDaemon(), discard, Options{Token: testToken})
	mux := http.NewServeMux()
	for _, r := range h.routes() {
		dec := requestDecoders[r.Method+" "+r.Pattern]
		mux.HandleFunc(r.Method+" "+r.Pattern, func(w http.ResponseWriter, req *http.Request) {
			if dec != nil {
				if err := dec(w, req); err != nil {
					h.fail(w, req, err)
					return
				}
			}
			w.WriteHeader(decoded)
		})
	}
	h.mux = mux
	return h
}

// TestDecodersCoverBodyRoutes: every route that takes a request body (per
// handlerIO, which the OpenAPI test checks against the document) is fuzzed.
func TestDecodersCoverBodyRoutes(t *testing.T) {
	for route, io := range handlerIO {
		if _, ok := requestDecoders[route]; io.request != "" && !ok {
			t.Errorf("%s takes a %s body but has no entry in requestDecoders", route, io.request)
		}
	}
	for route := range requestDecoders {
		if _, ok := handlerIO[route]; !ok {
			t.Errorf("requestDecoders has %s, which is not a route", route)
		}
	}
}

var pathParam = regexp.MustCompile(`\{[a-z]+\}`)

// FuzzDecodeRequests sends every route arbitrary bodies, content types,
// path segments and query strings through the guard and the handler's
// decoding: no panic, and bad input is a 4xx JSON error, never a 5xx. The
// seeds (a request of each kind, good and bad) are in
// testdata/fuzz/FuzzDecodeRequests. route names a route ("POST /v1/vms");
// any other value picks one by its length.
func FuzzDecodeRequests(f *testing.F) {
	h := decodingHandler()
	var routes []string
	for _, r := range h.routes() {
		routes = append(routes, r.Method+" "+r.Pattern)
	}
	sort.Strings(routes)
	f.Fuzz(func(t *testing.T, route, contentType, segment, query string, body []byte) {
		if !slices.Contains(routes, route) {
			route = routes[len(route)%len(routes)]
		}
		method, pattern, _ := strings.Cut(route, " ")
		segment = strings.ReplaceAll(segment, "/", "")
		if segment == "" || segment == "." || segment == ".." {
			segment = "x" // the mux redirects non-canonical paths before any route
		}
		r := httptest.NewRequest(method, "/", bytes.NewReader(body))
		r.URL.Path = pathParam.ReplaceAllLiteralString(pattern, segment)
		r.URL.RawQuery = query
		r.Host = "127.0.0.1:7380"
		r.Header.Set("Authorization", "Bearer "+testToken)
		if contentType != "" {
			r.Header.Set("Content-Type", contentType)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code == decoded {
			return
		}
		if w.Code < 400 || w.Code > 499 {
			t.Fatalf("%s %s (%q, %d bytes): status %d: %s", method, r.URL, contentType, len(body), w.Code, w.Body)
		}
		var eb ErrorBody
		if err := json.Unmarshal(w.Body.Bytes(), &eb); err != nil || eb.Error.Code == "" || eb.Error.Message == "" {
			t.Fatalf("%s %s: %d answer is not an Error document: %q", method, r.URL, w.Code, w.Body)
		}
	})
}
