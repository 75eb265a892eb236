package registry

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// FetchAttempts bounds how often a chunk whose content does not match its
// digest is fetched again before the fetch fails with ErrCorrupt.
const FetchAttempts = 3

// maxIdleConns is how many connections to the store stay open between
// requests: more than the parallel fetches of a restore and an import.
const maxIdleConns = 64

// maxObject bounds what is read of a manifest or record object.
const maxObject = 64 << 20

// wrapTransport wraps the HTTP transport of every Store opened (tests
// interpose on the requests to the real server with it).
var wrapTransport = func(rt http.RoundTripper) http.RoundTripper { return rt }

// Store is the bucket holding chunks, remote manifests, function records
// and code archives.
type Store struct {
	cfg    Config
	client *minio.Client
	trust  Trust // WithTrust; the zero value signs nothing and trusts nothing
}

// Open makes a client for cfg. It does not contact the store (Ping does).
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
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
	c, err := minio.New(cfg.Endpoint, &minio.Options{Creds: creds, Secure: cfg.Secure, Region: cfg.Region,
		Transport: wrapTransport(tr), MaxRetries: 2})
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return &Store{cfg: cfg, client: c}, nil
}

// Config returns the store's config.
func (s *Store) Config() Config { return s.cfg }

// ChunkSize is the chunk size pushes use.
func (s *Store) ChunkSize() int64 {
	if s.cfg.ChunkSize > 0 {
		return int64(s.cfg.ChunkSize)
	}
	return DefaultChunkSize
}

// Ping checks that the store answers and the bucket exists.
func (s *Store) Ping(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.classify("bucket "+s.cfg.Bucket, err)
	}
	if !ok {
		return fmt.Errorf("%w: bucket %s does not exist", ErrNotFound, s.cfg.Bucket)
	}
	return nil
}

// classify maps a client error to the package's sentinels: no answer or a
// 5xx is ErrUnavailable, 404 ErrNotFound; an untrusted certificate is a
// configuration error of its own.
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
		return fmt.Errorf("%w: %s", ErrNotFound, what)
	case r.StatusCode == 0 || r.StatusCode >= 500:
		return fmt.Errorf("%w: %s at %s: %v", ErrUnavailable, what, s.cfg.Endpoint, err)
	}
	return fmt.Errorf("registry %s: %s (%d %s)", what, r.Message, r.StatusCode, r.Code)
}

// exists reports whether key is in the bucket.
func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	_, err := s.client.StatObject(ctx, s.cfg.Bucket, key, minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if err = s.classify(key, err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return false, err
}

func (s *Store) put(ctx context.Context, key string, data []byte, contentType string) error {
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: contentType, DisableMultipart: true})
	return s.classify(key, err)
}

// get reads the object key whole into buf (grown as needed), at most limit
// bytes.
func (s *Store) get(ctx context.Context, key string, buf []byte, limit int64) ([]byte, error) {
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return nil, s.classify(key, err)
	}
	defer obj.Close()
	w := bytes.NewBuffer(buf[:0])
	n, err := io.Copy(w, io.LimitReader(obj, limit+1))
	if err != nil {
		return nil, s.classify(key, err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrCorrupt, key, limit)
	}
	return w.Bytes(), nil
}

// putChunk stores a chunk unless an object of that name is there already
// (content addressing: the same name is the same bytes; a resumed push
// skips what it sent before). It returns the stored size and whether it
// uploaded; buf is scratch space for the compressed bytes.
func (s *Store) putChunk(ctx context.Context, sum string, data []byte, buf *[]byte) (int64, bool, error) {
	info, err := s.client.StatObject(ctx, s.cfg.Bucket, chunkKey(sum), minio.StatObjectOptions{})
	if err == nil && info.Size > 0 {
		return info.Size, false, nil
	}
	if err != nil {
		if err = s.classify(chunkKey(sum), err); !errors.Is(err, ErrNotFound) {
			return 0, false, err
		}
	}
	*buf = compress(*buf, data)
	return int64(len(*buf)), true, s.put(ctx, chunkKey(sum), *buf, "application/zstd")
}

// fetchChunk fetches, decompresses and verifies one chunk into dst (its
// exact length), refetching a corrupt object up to FetchAttempts times.
// tmp is scratch space for the compressed bytes (may be nil). It returns
// the compressed bytes read.
func (s *Store) fetchChunk(ctx context.Context, sum string, dst, tmp []byte) (int64, error) {
	var lastErr error
	var read int64
	for attempt := 0; attempt < FetchAttempts; attempt++ {
		b, err := s.get(ctx, chunkKey(sum), tmp, MaxChunkSize+MaxChunkSize/8+1024)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return read, err
		}
		if err == nil {
			read += int64(len(b))
			if err = decodeChunk(dst, b, sum); err == nil {
				return read, nil
			}
		}
		lastErr = err
	}
	return read, fmt.Errorf("%w (refused after %d fetches)", lastErr, FetchAttempts)
}

// GetManifest fetches the remote manifest of snapshot id, verifies its
// signature (GetRecord) and only then checks its content.
func (s *Store) GetManifest(ctx context.Context, id string) (*RemoteManifest, error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("%w: snapshot id %q", ErrInvalid, id)
	}
	b, err := s.GetRecord(ctx, KindManifest, manifestKey(id))
	if err != nil {
		return nil, err
	}
	return decodeManifestAt(b, id)
}

// decodeManifestAt decodes the manifest stored under snapshot id's key.
func decodeManifestAt(b []byte, id string) (*RemoteManifest, error) {
	m, err := DecodeRemoteManifest(b)
	if err == nil && m.ID != id {
		return nil, fmt.Errorf("%w: %s holds the manifest of %s", ErrInvalid, manifestKey(id), m.ID)
	}
	return m, err
}

// HasManifest reports whether snapshot id was pushed.
func (s *Store) HasManifest(ctx context.Context, id string) (bool, error) {
	return s.exists(ctx, manifestKey(id))
}

// GetFunction fetches a function record and verifies its signature
// (GetRecord) before it checks its content.
func (s *Store) GetFunction(ctx context.Context, name string) (*FunctionRecord, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("%w: function name %q", ErrInvalid, name)
	}
	b, err := s.GetRecord(ctx, KindFunction, functionKey(name))
	if err != nil {
		return nil, err
	}
	return decodeFunctionRecordOf(b, name)
}

// decodeFunctionRecordOf decodes the record stored under name's key.
func decodeFunctionRecordOf(b []byte, name string) (*FunctionRecord, error) {
	r, err := decodeFunctionRecord(b)
	if err == nil && r.Name != name {
		return nil, fmt.Errorf("%w: %s holds the record of %s", ErrInvalid, functionKey(name), r.Name)
	}
	return r, err
}

// GetCode fetches a function record's code archive and checks its digest.
func (s *Store) GetCode(ctx context.Context, r *FunctionRecord) ([]byte, error) {
	var err error
	for attempt := 0; attempt < FetchAttempts; attempt++ {
		var b []byte
		if b, err = s.get(ctx, r.Code, nil, maxObject*4); err != nil && !errors.Is(err, ErrCorrupt) {
			return nil, err
		}
		if err == nil && sumHex(b) == r.CodeSHA256 {
			return b, nil
		}
		err = fmt.Errorf("%w: code archive of %s does not match its digest", ErrCorrupt, r.Name)
	}
	return nil, err
}

// EnsureBucket creates the bucket if it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	ok, err := s.client.BucketExists(ctx, s.cfg.Bucket)
	if err != nil {
		return s.classify("bucket "+s.cfg.Bucket, err)
	}
	if ok {
		return nil
	}
	return s.classify("bucket "+s.cfg.Bucket, s.client.MakeBucket(ctx, s.cfg.Bucket, minio.MakeBucketOptions{Region: s.cfg.Region}))
}
