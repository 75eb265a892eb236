// Package s3 is the objstore.Store of an S3-compatible bucket (AWS S3,
// MinIO, Ceph RGW, ...). Conditional puts are S3's conditional writes
// (If-None-Match: * and If-Match: <etag>), which the server must support.
package s3

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"iter"
	"net/http"
	"os"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// maxIdleConns is how many connections to the store stay open between
// requests: more than the parallel fetches of a restore and an import.
const maxIdleConns = 64

// Config says where the bucket is and how to reach it.
type Config struct {
	Endpoint  string // host:port, no scheme
	Bucket    string
	Region    string
	AccessKey string // empty with SecretKey: anonymous
	SecretKey string
	Secure    bool   // HTTPS
	CAFile    string // PEM bundle trusted for HTTPS besides the system's
	// WrapTransport, if set, wraps the HTTP transport (tests interpose
	// on the requests to a real server with it).
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// ErrNoConditional: the server refused a conditional put as not
// implemented (an S3-compatible store without conditional writes).
var ErrNoConditional = errors.New("s3: no conditional writes")

// Store is a bucket.
type Store struct {
	cfg    Config
	client *minio.Client
}

var _ objstore.Store = (*Store)(nil)

// Open makes a client for cfg. It does not contact the server (Ping does).
func Open(cfg Config) (*Store, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout = 30 * time.Second
	// Keep a connection per parallel fetch open between fetches (the
	// default keeps 2 per host: the others would be set up again, a round
	// trip each over a slow link).
	tr.MaxIdleConnsPerHost = maxIdleConns
	tr.MaxIdleConns = maxIdleConns
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("registry ca_file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("registry ca_file %s: no PEM certificate in it", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var creds *credentials.Credentials
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	} else {
		creds = credentials.NewStatic("", "", "", credentials.SignatureAnonymous)
	}
	var rt http.RoundTripper = tr
	if cfg.WrapTransport != nil {
		rt = cfg.WrapTransport(tr)
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: cfg.Secure, Region: cfg.Region,
		Transport: rt, MaxRetries: 2})
	if err != nil {
		return nil, fmt.Errorf("s3 %s: %w", cfg.Endpoint, err)
	}
	return &Store{cfg: cfg, client: c}, nil
}

// String names the bucket and its endpoint.
func (s *Store) String() string { return "s3://" + s.cfg.Endpoint + "/" + s.cfg.Bucket }

// classify maps a client error to objstore's sentinels: no answer or a
// 5xx is ErrUnavailable, 404 ErrNotFound, 412 ErrPrecondition; an
// untrusted certificate is a configuration error of its own.
func (s *Store) classify(what string, err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var verr *tls.CertificateVerificationError
	if errors.As(err, &verr) {
		return fmt.Errorf("registry %s at %s: the server's certificate is not trusted (ca_file names the CA that signed it): %v", what, s.cfg.Endpoint, err)
	}
	r := minio.ToErrorResponse(err)
	switch {
	case r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey" || r.Code == "NoSuchBucket":
		return fmt.Errorf("%w: %s", objstore.ErrNotFound, what)
	case r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed":
		return fmt.Errorf("%w: %s (%d %s: %s)", objstore.ErrPrecondition, what, r.StatusCode, r.Code, r.Message)
	case r.StatusCode == 0 || r.StatusCode >= 500:
		return fmt.Errorf("%w: %s at %s: %v", objstore.ErrUnavailable, what, s.cfg.Endpoint, err)
	}
	return fmt.Errorf("registry %s: %s (%d %s)", what, r.Message, r.StatusCode, r.Code)
}

// Ping checks that the server answers and the bucket exists.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.classify("bucket "+s.cfg.Bucket, err)
	}
	if !ok {
		return fmt.Errorf("%w: bucket %s does not exist", objstore.ErrNotFound, s.cfg.Bucket)
	}
	return nil
}

// Init creates the bucket if it does not exist.
func (s *Store) Init(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.classify("bucket "+s.cfg.Bucket, err)
	}
	if ok {
		return nil
	}
	return s.classify("bucket "+s.cfg.Bucket, s.client.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}))
}

// Put writes data in one request (no multipart: objects are small).
func (s *Store) Put(ctx context.Context, key string, data []byte, opts objstore.PutOptions) error {
	if err := objstore.CheckKey(key); err != nil {
		return err
	}
	if err := objstore.CheckPut(opts); err != nil {
		return err
	}
	po := minio.PutObjectOptions{ContentType: opts.ContentType, DisableMultipart: true}
	switch {
	case opts.IfAbsent:
		po.SetMatchETagExcept("*")
	case opts.IfMatch != "":
		po.SetMatchETag(opts.IfMatch)
	}
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)), po)
	if r := minio.ToErrorResponse(err); (opts.IfAbsent || opts.IfMatch != "") &&
		(r.StatusCode == http.StatusNotImplemented || r.Code == "NotImplemented") {
		return fmt.Errorf("%w: put %s: the S3 server at %s does not implement conditional writes (If-Match, If-None-Match), which the registry needs: %v",
			ErrNoConditional, key, s.cfg.Endpoint, err)
	}
	err = s.classify(key, err)
	if opts.IfMatch != "" && errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("%w: %s is gone", objstore.ErrPrecondition, key)
	}
	return err
}

// Get reads the object or a range of it.
func (s *Store) Get(ctx context.Context, key string, opts objstore.GetOptions) ([]byte, objstore.Info, error) {
	if err := objstore.CheckKey(key); err != nil {
		return nil, objstore.Info{}, err
	}
	if err := objstore.CheckGet(opts); err != nil {
		return nil, objstore.Info{}, err
	}
	var gopts minio.GetObjectOptions
	ranged := opts.Offset > 0 || opts.Length > 0
	if ranged {
		end := int64(0)
		if opts.Length > 0 {
			end = opts.Offset + opts.Length - 1
		}
		if err := gopts.SetRange(opts.Offset, end); err != nil {
			return nil, objstore.Info{}, fmt.Errorf("get %s: %w", key, err)
		}
	}
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, gopts)
	if err != nil {
		return nil, objstore.Info{}, s.classify(key, err)
	}
	defer obj.Close()
	limit := opts.Limit
	if limit <= 0 {
		limit = 1<<63 - 2
	}
	// Read first: the object's info then comes from the GET's response
	// (a Stat first would be a HEAD, and the GET after it would fail
	// when a writer replaced the object in between).
	w := bytes.NewBuffer(opts.Buf[:0])
	n, err := io.Copy(w, io.LimitReader(obj, limit+1))
	if err != nil {
		if ranged && minio.ToErrorResponse(err).Code == "InvalidRange" {
			// The range starts at or past the end: no bytes.
			info, err := s.Stat(ctx, key)
			return opts.Buf[:0], info, err
		}
		return nil, objstore.Info{}, s.classify(key, err)
	}
	if n > limit {
		return nil, objstore.Info{}, fmt.Errorf("%w: %s is larger than %d bytes", objstore.ErrTooLarge, key, limit)
	}
	oi, err := obj.Stat()
	if err != nil {
		return nil, objstore.Info{}, s.classify(key, err)
	}
	// The whole object was read, or a range of it: then the object's
	// size is in the response's Content-Range.
	info := objstore.Info{Key: key, Size: n, ModTime: oi.LastModified, ETag: oi.ETag}
	if ranged {
		info.Size = rangeTotal(oi.Headers.Get("Content-Range"), n)
	}
	return w.Bytes(), info, nil
}

// rangeTotal reads the object's size from a Content-Range header
// ("bytes 0-9/42"), else returns def.
func rangeTotal(h string, def int64) int64 {
	var a, b, total int64
	if _, err := fmt.Sscanf(h, "bytes %d-%d/%d", &a, &b, &total); err != nil {
		return def
	}
	return total
}

// Stat returns the object's Info.
func (s *Store) Stat(ctx context.Context, key string) (objstore.Info, error) {
	if err := objstore.CheckKey(key); err != nil {
		return objstore.Info{}, err
	}
	oi, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err != nil {
		return objstore.Info{}, s.classify(key, err)
	}
	return objstore.Info{Key: key, Size: oi.Size, ModTime: oi.LastModified, ETag: oi.ETag}, nil
}

// List yields the objects under prefix in key order.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel() // stops the listing when the caller does
		for o := range s.client.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
			if o.Err != nil {
				yield(objstore.Info{}, s.classify("list "+prefix, o.Err))
				return
			}
			if !yield(objstore.Info{Key: o.Key, Size: o.Size, ModTime: o.LastModified, ETag: o.ETag}, nil) {
				return
			}
		}
	}
}

// Delete removes the keys in batches.
func (s *Store) Delete(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	for _, k := range keys {
		if err := objstore.CheckKey(k); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the feeder when the removal stops early
	ch := make(chan minio.ObjectInfo)
	go func() {
		defer close(ch)
		for _, k := range keys {
			select {
			case ch <- minio.ObjectInfo{Key: k}:
			case <-ctx.Done():
				return
			}
		}
	}()
	for e := range s.client.RemoveObjects(ctx, s.cfg.Bucket, ch, minio.RemoveObjectsOptions{}) {
		if e.Err != nil {
			return s.classify("delete "+e.ObjectName, e.Err)
		}
	}
	return ctx.Err()
}
