package miniotest

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Client is a plain S3 client on the server (plain HTTP), for tests to
// look at and damage objects behind thaw's back.
func (s *Server) Client(t testing.TB) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Config.Endpoint, &minio.Options{Creds: credentials.NewStaticV4(s.Config.AccessKey, s.Config.SecretKey, "")})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Get reads an object of the test bucket whole.
func (s *Server) Get(t testing.TB, key string) []byte {
	t.Helper()
	o, err := s.Client(t).GetObject(context.Background(), s.Config.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	b, err := io.ReadAll(o)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Put writes an object of the test bucket.
func (s *Server) Put(t testing.TB, key string, b []byte) {
	t.Helper()
	if _, err := s.Client(t).PutObject(context.Background(), s.Config.Bucket, key, bytes.NewReader(b), int64(len(b)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Count is how many objects of the test bucket start with prefix.
func (s *Server) Count(t testing.TB, prefix string) int {
	t.Helper()
	n := 0
	for o := range s.Client(t).ListObjects(context.Background(), s.Config.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		n++
	}
	return n
}
