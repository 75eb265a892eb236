// Package objstore is the object store the snapshot registry keeps its
// objects in: a flat namespace of keys holding whole objects, written
// whole, read whole or by byte range, listed by prefix. Implementations:
// objstore/s3 (an S3-compatible bucket) and objstore/fs (a directory,
// local or shared by the nodes over NFS). objstoretest is the conformance
// suite every implementation runs.
//
// The interface holds what the registry uses and no more: no multipart
// uploads, no metadata besides size, time and version, no bucket
// administration beyond creating the container.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Every other failure is wrapped with the key it concerns.
var (
	// ErrNotFound: no object under the key (or no bucket or directory).
	ErrNotFound = errors.New("object not found")
	// ErrPrecondition: a conditional put found the object present
	// (IfAbsent) or changed since it was read (IfMatch); nothing was
	// written.
	ErrPrecondition = errors.New("object store precondition failed")
	// ErrUnavailable: the store did not answer (network, 5xx, a stale
	// or unreachable network filesystem). Nothing was changed that the
	// caller can rely on; trying again later may succeed.
	ErrUnavailable = errors.New("object store unavailable")
	// ErrInvalidKey: a key the store refuses (empty, absolute, with "."
	// or ".." or empty segments, too long, not UTF-8).
	ErrInvalidKey = errors.New("invalid object key")
	// ErrTooLarge: an object (or its range) longer than the read's Limit.
	ErrTooLarge = errors.New("object larger than the limit")
)

// MaxKeyLen is the longest key accepted (S3's limit).
const MaxKeyLen = 1024

// Info describes a stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time // when it was last written
	// ETag identifies this version of the object: any put of the key
	// changes it unless the store can tell the content is the same. Only
	// compare it for equality and pass it to PutOptions.IfMatch.
	ETag string
}

// PutOptions are the conditions and attributes of a put.
type PutOptions struct {
	// IfAbsent writes only if no object has the key (ErrPrecondition
	// otherwise).
	IfAbsent bool
	// IfMatch writes only if the object exists with this ETag
	// (ErrPrecondition otherwise). Not with IfAbsent.
	IfMatch string
	// ContentType is kept by stores that keep one (S3) and ignored by
	// the others.
	ContentType string
}

// GetOptions select what of an object a get reads.
type GetOptions struct {
	// Offset and Length select the bytes [Offset, Offset+Length), cut at
	// the object's end; Length 0 reads to the end. A range that starts at
	// or past the end reads no bytes.
	Offset, Length int64
	// Limit > 0 refuses (ErrTooLarge) to read more than Limit bytes.
	Limit int64
	// Buf is reused for the result when it is large enough.
	Buf []byte
}

// Store is an object store. Its methods are safe for concurrent use.
// Writes are atomic: a reader sees an object's old bytes or its new ones,
// never a part; a listing shows only complete objects.
type Store interface {
	// Put stores data under key, replacing what is there unless opts
	// says otherwise.
	Put(ctx context.Context, key string, data []byte, opts PutOptions) error
	// Get reads the object (or the range opts names) and its Info.
	Get(ctx context.Context, key string, opts GetOptions) ([]byte, Info, error)
	// Stat returns the object's Info; ErrNotFound if there is none.
	Stat(ctx context.Context, key string) (Info, error)
	// List yields the objects whose keys start with prefix, in
	// ascending byte order of their keys; an error ends the sequence.
	List(ctx context.Context, prefix string) iter.Seq2[Info, error]
	// Delete removes the objects; keys with no object are no error.
	Delete(ctx context.Context, keys ...string) error
	// Ping checks that the store answers and its bucket or directory
	// exists (ErrNotFound if it does not).
	Ping(ctx context.Context) error
	// Init creates the bucket or directory if it does not exist.
	Init(ctx context.Context) error
	// String says where the store is, for logs and messages.
	String() string
}

// CheckKey refuses keys no store accepts: empty, longer than MaxKeyLen,
// not UTF-8, starting with "/", with a NUL or backslash, or with an
// empty, "." or ".." segment.
func CheckKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: %d bytes (at most %d)", ErrInvalidKey, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: %q is not UTF-8", ErrInvalidKey, key)
	case strings.ContainsAny(key, "\x00\\"):
		return fmt.Errorf("%w: %q holds a NUL or a backslash", ErrInvalidKey, key)
	case strings.HasPrefix(key, "/"):
		return fmt.Errorf("%w: %q is absolute", ErrInvalidKey, key)
	}
	for seg := range strings.SplitSeq(key, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("%w: %q has an empty, \".\" or \"..\" segment", ErrInvalidKey, key)
		}
	}
	return nil
}

// CheckPut refuses options that contradict each other.
func CheckPut(opts PutOptions) error {
	if opts.IfAbsent && opts.IfMatch != "" {
		return errors.New("objstore: put with IfAbsent and IfMatch together")
	}
	return nil
}

// CheckGet refuses a negative offset, length or limit.
func CheckGet(opts GetOptions) error {
	if opts.Offset < 0 || opts.Length < 0 || opts.Limit < 0 {
		return fmt.Errorf("objstore: get range %d+%d limit %d: negative", opts.Offset, opts.Length, opts.Limit)
	}
	return nil
}
