package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/objstore"
	"github.com/thaw-dev/thaw/internal/signing"
)

// ErrUntrusted: a manifest or record not signed by a trusted key for the
// object it was read from (a *signing.Refusal says why). Nothing of it
// was used.
var ErrUntrusted = signing.ErrUntrusted

// Record kinds: the kind a record is signed as, with its object name.
const (
	KindManifest = "manifest"
	KindFunction = "function"
)

// Trust is what a Store signs with and accepts. Every record a node acts
// on (remote manifests, function records, and any kind added later) goes
// through PutRecord and GetRecord.
type Trust struct {
	// Signer signs every record this node writes; nil: the store refuses
	// to write records.
	Signer *signing.Key
	// Keys are the keys whose records are accepted (the node's own
	// included); nil: none is.
	Keys *signing.Keyring
	// Refused, if set, is told of every record GetRecord refuses.
	Refused func(kind, object string, r *signing.Refusal)
}

// WithTrust returns a store on the same client that signs and verifies
// with t.
func (s *Store) WithTrust(t Trust) *Store {
	c := *s
	c.trust = t
	return &c
}

// Keys are the keys the store accepts records from.
func (s *Store) Keys() *signing.Keyring { return s.trust.Keys }

// PutRecord signs payload as the record of kind at key and stores it (one
// object: the record and its signature are never seen apart).
func (s *Store) PutRecord(ctx context.Context, kind, key string, payload []byte) error {
	return s.putRecordIf(ctx, kind, key, payload, objstore.PutOptions{})
}

// putRecordIf is PutRecord under cond's conditions (a read-modify-write
// that must not overwrite another writer's record): objstore's
// ErrPrecondition when they do not hold.
func (s *Store) putRecordIf(ctx context.Context, kind, key string, payload []byte, cond objstore.PutOptions) error {
	if err := s.canSign(); err != nil {
		return err
	}
	b, err := signing.Seal(s.trust.Signer, kind, key, payload)
	if err != nil {
		return err
	}
	cond.ContentType = "application/json"
	return storeErr(s.obj.Put(ctx, key, b, cond))
}

// ErrNoKey: the store has no signing key, so it writes no record.
var ErrNoKey = errors.New("registry: no signing key; nothing is published unsigned")

// canSign fails unless the store can sign what it writes (checked before
// a push uploads anything).
func (s *Store) canSign() error {
	if s.trust.Signer == nil {
		return ErrNoKey
	}
	return nil
}

// GetRecord fetches the record of kind at key and returns its bytes once
// a trusted key's signature over them, kind and key verifies; a refusal
// is ErrUntrusted and reported to Trust.Refused.
func (s *Store) GetRecord(ctx context.Context, kind, key string) ([]byte, error) {
	payload, _, err := s.getRecordTag(ctx, kind, key)
	return payload, err
}

// getRecordTag is GetRecord with the object's ETag ("" when there is no
// object), for a write conditional on it.
func (s *Store) getRecordTag(ctx context.Context, kind, key string) ([]byte, string, error) {
	b, tag, err := s.getInfo(ctx, key, nil, maxObject)
	if err != nil {
		return nil, "", err
	}
	payload, _, err := signing.Open(s.trust.Keys, kind, key, b)
	var r *signing.Refusal
	if errors.As(err, &r) && s.trust.Refused != nil {
		s.trust.Refused(kind, key, r)
	}
	return payload, tag, err
}

// readRecord fetches the record of kind at key and checks it as
// GetRecord does, without reporting a refusal: its payload (unverified
// when refused), the key id it names and the refusal, if any. For
// listings and garbage collection, which account for every record,
// trusted or not, and never act on one that is refused.
func (s *Store) readRecord(ctx context.Context, kind, key string) (payload []byte, keyID string, refused *signing.Refusal, err error) {
	b, err := s.get(ctx, key, nil, maxObject)
	if err != nil {
		return nil, "", nil, err
	}
	keyID = signing.Signer(b)
	payload, _, err = signing.Open(s.trust.Keys, kind, key, b)
	if !errors.As(err, &refused) {
		return payload, keyID, nil, err
	}
	if payload, err = signing.Payload(b); err != nil {
		return nil, keyID, refused, fmt.Errorf("%w: %s: %v", ErrInvalid, key, err)
	}
	return payload, keyID, refused, nil
}
