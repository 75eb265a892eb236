// Package apitest checks values and HTTP answers against thaw's OpenAPI
// document (internal/api/openapi.json) with kin-openapi. Only tests import
// it (internal/api's and the end-to-end tests); the daemon and the CLI do
// not link it.
package apitest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
)

// Checker checks values and answers against one OpenAPI document.
type Checker struct {
	Doc    *openapi3.T
	router routers.Router
}

var (
	mu     sync.Mutex
	loaded = map[string]*Checker{}
)

// Load parses and validates (examples included) an OpenAPI document;
// documents are loaded once per process.
func Load(spec []byte) (*Checker, error) {
	mu.Lock()
	defer mu.Unlock()
	if c, ok := loaded[string(spec)]; ok {
		return c, nil
	}
	doc, err := openapi3.NewLoader().LoadFromData(spec)
	if err == nil {
		err = doc.Validate(context.Background(), openapi3.EnableExamplesValidation())
	}
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	// Route by path alone: the daemon is reached on a Unix socket or any
	// address.
	routed := *doc
	routed.Servers = nil
	r, err := gorillamux.NewRouter(&routed)
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	c := &Checker{Doc: doc, router: r}
	loaded[string(spec)] = c
	return c, nil
}

// CheckResponse validates one answer (status, headers and body) to req
// against the operation the document has for it. The request's body is
// not read.
func (c *Checker) CheckResponse(req *http.Request, status int, header http.Header, body []byte) error {
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		return fmt.Errorf("%s %s: no operation in openapi.json: %w", req.Method, req.URL.Path, err)
	}
	noAuth := openapi3filter.NoopAuthenticationFunc
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: noAuth}},
		Status:  status,
		Header:  header,
		Body:    io.NopCloser(bytes.NewReader(body)),
		Options: &openapi3filter.Options{IncludeResponseStatus: true, AuthenticationFunc: noAuth},
	}
	if err := openapi3filter.ValidateResponse(req.Context(), in); err != nil {
		return fmt.Errorf("%s %s -> %d: %w", req.Method, req.URL.Path, status, err)
	}
	return nil
}

// CheckValue validates v, encoded as JSON, against the named schema of
// components/schemas.
func (c *Checker) CheckValue(schema string, v any) error {
	ref, ok := c.Doc.Components.Schemas[schema]
	if !ok || ref.Value == nil {
		return fmt.Errorf("openapi.json has no schema %q", schema)
	}
	b, err := jsonValue(v)
	if err != nil {
		return err
	}
	if err := ref.Value.VisitJSON(b); err != nil {
		return fmt.Errorf("%s: %w", schema, err)
	}
	return nil
}

// Transport checks every answer that passes through it and reports what
// does not match the document to report (a test's Errorf).
type Transport struct {
	Checker *Checker
	Base    http.RoundTripper
	Report  func(format string, args ...any)
}

func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.Base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if rerr != nil {
		return resp, rerr
	}
	if err := t.Checker.CheckResponse(req, resp.StatusCode, resp.Header, body); err != nil {
		t.Report("openapi: %v", err)
	}
	return resp, nil
}
