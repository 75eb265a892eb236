package s3_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/thaw-dev/thaw/internal/objstore"
	"github.com/thaw-dev/thaw/internal/objstore/objstoretest"
	"github.com/thaw-dev/thaw/internal/objstore/s3"
	"github.com/thaw-dev/thaw/internal/registry/miniotest"
)

// TestConformance runs the suite on a real MinIO, a new bucket per test.
func TestConformance(t *testing.T) {
	srv := miniotest.Start(t)
	var n atomic.Int64
	objstoretest.Run(t, func(t *testing.T) objstore.Store {
		return bucket(t, srv, fmt.Sprintf("conformance-%d", n.Add(1)))
	})
}

func bucket(t *testing.T, srv *miniotest.Server, name string) *s3.Store {
	t.Helper()
	c := srv.Config
	st, err := s3.Open(s3.Config{Endpoint: c.Endpoint, Bucket: name, Region: c.Region, AccessKey: c.AccessKey, SecretKey: c.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Init(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestErrors: a missing bucket is ErrNotFound, a stopped server
// ErrUnavailable.
func TestErrors(t *testing.T) {
	srv := miniotest.Start(t)
	c := srv.Config
	missing, err := s3.Open(s3.Config{Endpoint: c.Endpoint, Bucket: "no-such-bucket", AccessKey: c.AccessKey, SecretKey: c.SecretKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := missing.Ping(context.Background()); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("ping of a missing bucket: %v, want ErrNotFound", err)
	}
	st := bucket(t, srv, "errors")
	srv.Stop()
	err = st.Put(context.Background(), "k", []byte("x"), objstore.PutOptions{})
	if !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("put with the server stopped: %v, want ErrUnavailable", err)
	}
	if _, err := st.Stat(context.Background(), "k"); !errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stat with the server stopped: %v, want ErrUnavailable", err)
	}
}

// BenchmarkChunk: puts and gets of 512 KiB objects (the default chunk).
func BenchmarkChunk(b *testing.B) {
	srv := miniotest.Start(b)
	c := srv.Config
	st, err := s3.Open(s3.Config{Endpoint: c.Endpoint, Bucket: c.Bucket, Region: c.Region, AccessKey: c.AccessKey, SecretKey: c.SecretKey})
	if err != nil {
		b.Fatal(err)
	}
	objstoretest.Bench(b, st, 512<<10)
}

// notImplemented answers conditional PUTs as an S3-compatible server
// without conditional writes does (501 NotImplemented) and passes the rest
// to the real server.
type notImplemented struct{ rt http.RoundTripper }

func (n notImplemented) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPut && (req.Header.Get("If-Match") != "" || req.Header.Get("If-None-Match") != "") {
		body := `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>`
		return &http.Response{StatusCode: http.StatusNotImplemented, Status: "501 Not Implemented", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
			Header: http.Header{"Content-Type": {"application/xml"}}, Body: io.NopCloser(strings.NewReader(body)),
			ContentLength: int64(len(body)), Request: req}, nil
	}
	return n.rt.RoundTrip(req)
}

// A server without conditional writes: a conditional put says so (not
// "unavailable": trying again will not help) and writes nothing; plain
// puts work.
func TestNoConditionalWrites(t *testing.T) {
	srv := miniotest.Start(t)
	c := srv.Config
	st, err := s3.Open(s3.Config{Endpoint: c.Endpoint, Bucket: c.Bucket, AccessKey: c.AccessKey, SecretKey: c.SecretKey,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper { return notImplemented{rt} }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = st.Put(ctx, "k", []byte("x"), objstore.PutOptions{IfAbsent: true})
	if !errors.Is(err, s3.ErrNoConditional) || errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), "conditional writes") {
		t.Fatalf("conditional put on a server without them: %v", err)
	}
	if _, err := st.Stat(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("refused put left an object: %v", err)
	}
	if err := st.Put(ctx, "k", []byte("x"), objstore.PutOptions{}); err != nil {
		t.Fatalf("plain put: %v", err)
	}
}
