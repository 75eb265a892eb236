package s3_test

import (
	"context"
	"errors"
	"fmt"
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
