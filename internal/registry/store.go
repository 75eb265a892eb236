package registry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/thaw-dev/thaw/internal/objstore"
	fsstore "github.com/thaw-dev/thaw/internal/objstore/fs"
	"github.com/thaw-dev/thaw/internal/objstore/s3"
	"github.com/thaw-dev/thaw/internal/registry/chunk"
)

// FetchAttempts bounds how often a chunk whose content does not match its
// digest is fetched again before the fetch fails with ErrCorrupt.
const FetchAttempts = 3

// maxObject bounds what is read of a manifest or record object.
const maxObject = 64 << 20

// wrapTransport wraps the HTTP transport of every S3 store opened (tests
// interpose on the requests to the real server with it).
var wrapTransport = func(rt http.RoundTripper) http.RoundTripper { return rt }

// Store is the registry on an object store: the bucket or directory
// holding chunks, remote manifests, records and code archives.
type Store struct {
	cfg   Config
	obj   objstore.Store
	trust Trust // WithTrust; the zero value signs nothing and trusts nothing
}

// Open opens the object store cfg names (Config.Type). It does not
// contact the store (Ping does).
func Open(cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var obj objstore.Store
	var err error
	switch cfg.Type {
	case TypeFS:
		obj, err = fsstore.Open(cfg.Path)
	default:
		obj, err = s3.Open(s3.Config{Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region,
			AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, Secure: cfg.Secure, CAFile: cfg.CAFile,
			WrapTransport: wrapTransport})
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	return New(obj, cfg), nil
}

// New is the registry on obj; cfg gives its chunk size and what
// Config reports.
func New(obj objstore.Store, cfg Config) *Store {
	return &Store{cfg: cfg, obj: obj}
}

// Config returns the store's config.
func (s *Store) Config() Config { return s.cfg }

// Objects is the object store under the registry.
func (s *Store) Objects() objstore.Store { return s.obj }

// ChunkSize is the chunk size pushes use.
func (s *Store) ChunkSize() int64 {
	if s.cfg.ChunkSize > 0 {
		return int64(s.cfg.ChunkSize)
	}
	return DefaultChunkSize
}

// Ping checks that the store answers and the bucket or directory exists.
func (s *Store) Ping(ctx context.Context) error {
	return storeErr(s.obj.Ping(ctx))
}

// putChunk stores a chunk unless an object of that name is there already
// (content addressing: the same name is the same bytes; a resumed push
// skips what it sent before). It returns the stored size and whether it
// uploaded; buf is scratch space for the compressed bytes.
func (s *Store) putChunk(ctx context.Context, sum string, data []byte, buf *[]byte) (int64, bool, error) {
	info, err := s.obj.Stat(ctx, chunkKey(sum))
	if err == nil && info.Size > 0 {
		return info.Size, false, nil
	}
	if err != nil {
		if err = storeErr(err); !errors.Is(err, ErrNotFound) {
			return 0, false, err
		}
	}
	*buf = chunk.Compress(*buf, data)
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
			if err = chunk.Decode(dst, b, sum); err == nil {
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
	return getChecked(ctx, s, KindManifest, "snapshot id", id, idRE, manifestKey, decodeManifestAt)
}

// getChecked fetches the record of kind stored under key(name), once name
// (what it is) matches re, and decodes it with decode only after GetRecord
// verified its signature.
func getChecked[T any](ctx context.Context, s *Store, kind, what, name string, re *regexp.Regexp,
	key func(string) string, decode func([]byte, string) (*T, error)) (*T, error) {
	if !re.MatchString(name) {
		return nil, fmt.Errorf("%w: %s %q", ErrInvalid, what, name)
	}
	b, err := s.GetRecord(ctx, kind, key(name))
	if err != nil {
		return nil, err
	}
	return decode(b, name)
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
	return getChecked(ctx, s, KindFunction, "function name", name, nameRE, functionKey, decodeFunctionRecordOf)
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
		if err == nil && chunk.SumHex(b) == r.CodeSHA256 {
			return b, nil
		}
		err = fmt.Errorf("%w: code archive of %s does not match its digest", ErrCorrupt, r.Name)
	}
	return nil, err
}

// EnsureBucket creates the bucket or directory if it does not exist.
func (s *Store) EnsureBucket(ctx context.Context) error {
	return storeErr(s.obj.Init(ctx))
}
