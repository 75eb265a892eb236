package registry

import (
	"context"
	"errors"
	"iter"
	"strings"

	"github.com/thaw-dev/thaw/internal/objstore"
)

// The registry's only contact with its object store: these helpers, which
// turn objstore's errors into the package's.

// storeErr maps an object store's error to the package's sentinels:
// objstore.ErrNotFound is ErrNotFound, ErrUnavailable ErrUnavailable,
// ErrTooLarge ErrCorrupt. The result matches both sentinels (and whatever
// the store wrapped, a full disk's ENOSPC included) and reads as the
// registry's message would.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	for _, m := range []struct{ from, to error }{{objstore.ErrNotFound, ErrNotFound},
		{objstore.ErrUnavailable, ErrUnavailable}, {objstore.ErrTooLarge, ErrCorrupt}} {
		if errors.Is(err, m.from) {
			return &seamError{reg: m.to, from: m.from, err: err}
		}
	}
	return err
}

// seamError is an object store's error as the registry reports it.
type seamError struct {
	reg, from, err error
}

func (e *seamError) Error() string {
	return e.reg.Error() + ": " + strings.TrimPrefix(e.err.Error(), e.from.Error()+": ")
}

func (e *seamError) Unwrap() []error { return []error{e.reg, e.err} }

// exists reports whether key is in the store.
func (s *Store) exists(ctx context.Context, key string) (bool, error) {
	_, err := s.obj.Stat(ctx, key)
	if err == nil {
		return true, nil
	}
	if err = storeErr(err); errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return false, err
}

func (s *Store) put(ctx context.Context, key string, data []byte, contentType string) error {
	return storeErr(s.obj.Put(ctx, key, data, objstore.PutOptions{ContentType: contentType}))
}

// get reads the object key whole into buf (grown as needed), at most limit
// bytes (more is ErrCorrupt).
func (s *Store) get(ctx context.Context, key string, buf []byte, limit int64) ([]byte, error) {
	b, _, err := s.getInfo(ctx, key, buf, limit)
	return b, err
}

// getInfo is get with the object's ETag, for a write conditional on it.
func (s *Store) getInfo(ctx context.Context, key string, buf []byte, limit int64) ([]byte, string, error) {
	b, info, err := s.obj.Get(ctx, key, objstore.GetOptions{Limit: limit, Buf: buf})
	if err != nil {
		return nil, "", storeErr(err)
	}
	return b, info.ETag, nil
}

// list yields the objects under prefix, in key order.
func (s *Store) list(ctx context.Context, prefix string) iter.Seq2[objstore.Info, error] {
	return func(yield func(objstore.Info, error) bool) {
		for o, err := range s.obj.List(ctx, prefix) {
			if !yield(o, storeErr(err)) || err != nil {
				return
			}
		}
	}
}

// remove deletes keys (missing ones are no error).
func (s *Store) remove(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	return storeErr(s.obj.Delete(ctx, keys...))
}
