package triggers

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/wire"
)

// Endpoint authentication.
const (
	AuthNone = "none"
	AuthKey  = "key"
)

// keyPrefix starts every endpoint key, so a key is recognizable (and
// scanners can find leaked ones).
const keyPrefix = "thk_"

// endpointRecord is an endpoint as stored: its key only as a SHA-256
// hash (keys are 256 random bits, so a plain hash is enough).
type endpointRecord struct {
	wire.Endpoint
	KeyHash string `json:"key_hash,omitempty"`
}

var (
	nameRE   = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	prefixRE = regexp.MustCompile(`^(/[A-Za-z0-9._~-]+)+$`)
)

func validName(kind, name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %s name %q: use 1-63 lowercase letters, digits and '-', starting with a letter", ErrInvalid, kind, name)
	}
	return nil
}

// oneOf is v, or the first of allowed when v is empty; ErrInvalid if v is
// none of them (what names the field).
func oneOf(what, v string, allowed ...string) (string, error) {
	if v == "" {
		return allowed[0], nil
	}
	if !slices.Contains(allowed, v) {
		return "", fmt.Errorf("%w: %s %q: use %s", ErrInvalid, what, v, strings.Join(allowed, " or "))
	}
	return v, nil
}

// validPrefix checks an endpoint's path prefix: "/" and segments of
// unreserved characters, neither "." nor "..".
func validPrefix(p string) error {
	if len(p) > 200 || !prefixRE.MatchString(p) {
		return fmt.Errorf("%w: path prefix %q: use /segment[/segment...] of letters, digits and . _ ~ -, at most 200 characters", ErrInvalid, p)
	}
	for _, seg := range strings.Split(p[1:], "/") {
		if seg == "." || seg == ".." {
			return fmt.Errorf("%w: path prefix %q: no . or .. segments", ErrInvalid, p)
		}
	}
	return nil
}

// newKey is a fresh endpoint key and its stored hash.
func newKey() (key, hash string) {
	var b [32]byte
	_, _ = rand.Read(b[:])
	key = keyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return key, hashKey(key)
}

func hashKey(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:])
}

// keyMatches compares a presented key with an endpoint's stored hash in
// constant time (the hashes have a fixed length, whatever was presented).
func keyMatches(presented, storedHash string) bool {
	want, err := hex.DecodeString(storedHash)
	if err != nil || len(want) != sha256.Size {
		return false
	}
	got := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(got[:], want) == 1
}

// CreateEndpoint creates an endpoint; with key auth the answer carries
// the key, the only time it is shown.
func (t *Triggers) CreateEndpoint(ctx context.Context, req wire.CreateEndpointRequest) (*wire.Endpoint, error) {
	ref, err := daemon.ParseRef(req.Function)
	if err != nil {
		return nil, err
	}
	if req.Name == "" {
		req.Name = strings.ReplaceAll(req.Function, ":", "-")
	}
	if err := validName("endpoint", req.Name); err != nil {
		return nil, err
	}
	if req.PathPrefix == "" {
		req.PathPrefix = "/" + req.Name
	}
	req.PathPrefix = strings.TrimSuffix(req.PathPrefix, "/")
	if err := validPrefix(req.PathPrefix); err != nil {
		return nil, err
	}
	if req.Auth, err = oneOf("auth", req.Auth, AuthNone, AuthKey); err != nil {
		return nil, err
	}
	if err := t.inv.CheckRef(ctx, req.Function); err != nil {
		return nil, err
	}
	eps, err := t.ListEndpoints(ctx)
	if err != nil {
		return nil, err
	}
	for _, ep := range eps {
		if ep.PathPrefix == req.PathPrefix && ep.Name != req.Name {
			return nil, fmt.Errorf("%w: endpoint %s already serves path prefix %s", ErrExists, ep.Name, ep.PathPrefix)
		}
	}
	rec := endpointRecord{Endpoint: wire.Endpoint{Name: req.Name, Function: ref.String(), PathPrefix: req.PathPrefix,
		Auth: req.Auth, ExposeErrors: req.ExposeErrors, CreatedAt: time.Now().UTC()}}
	key := ""
	if req.Auth == AuthKey {
		key, rec.KeyHash = newKey()
		rec.KeyHint = key[:len(keyPrefix)+4]
	}
	b, _ := json.Marshal(rec)
	rev, err := t.e.endpoints.Create(ctx, rec.Name, b)
	if err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("%w: endpoint %s", ErrExists, rec.Name)
		}
		return nil, fmt.Errorf("%w: store endpoint: %v", ErrEngine, err)
	}
	t.awaitRoutes(rec.Name, rev)
	out := rec.Endpoint
	out.Key = key
	t.log.Info("endpoint created", "endpoint", rec.Name, "function", rec.Function, "path_prefix", rec.PathPrefix, "auth", rec.Auth)
	return &out, nil
}

// getEndpoint reads an endpoint's record and its revision.
func (t *Triggers) getEndpoint(ctx context.Context, name string) (*endpointRecord, uint64, error) {
	if err := validName("endpoint", name); err != nil {
		return nil, 0, err
	}
	return getRecord[endpointRecord](ctx, t.e.endpoints, "endpoint", name, fmt.Errorf("%w: endpoint %s", ErrNotFound, name))
}

// GetEndpoint describes an endpoint (never its key).
func (t *Triggers) GetEndpoint(ctx context.Context, name string) (*wire.Endpoint, error) {
	rec, _, err := t.getEndpoint(ctx, name)
	if err != nil {
		return nil, err
	}
	return &rec.Endpoint, nil
}

// ListEndpoints lists the endpoints by name.
func (t *Triggers) ListEndpoints(ctx context.Context) ([]*wire.Endpoint, error) {
	recs, err := t.endpointRecords(ctx)
	out := make([]*wire.Endpoint, len(recs))
	for i, r := range recs {
		out[i] = &r.Endpoint
	}
	return out, err
}

func (t *Triggers) endpointRecords(ctx context.Context) ([]*endpointRecord, error) {
	return listRecords(ctx, t.e.endpoints, func(ctx context.Context, name string) (*endpointRecord, error) {
		rec, _, err := t.getEndpoint(ctx, name)
		return rec, err
	})
}

// DeleteEndpoint removes an endpoint; its requests get 404 from then on.
func (t *Triggers) DeleteEndpoint(ctx context.Context, name string) error {
	if err := purgeRecord(ctx, t.e.endpoints, "endpoint", name, t.getEndpoint); err != nil {
		return err
	}
	t.awaitRoutes(name, 0)
	t.log.Info("endpoint deleted", "endpoint", name)
	return nil
}

// RotateEndpointKey gives a key endpoint a new key (the old one stops
// working at once) and answers it, the only time it is shown.
func (t *Triggers) RotateEndpointKey(ctx context.Context, name string) (*wire.Endpoint, error) {
	rec, rev, err := t.getEndpoint(ctx, name)
	if err != nil {
		return nil, err
	}
	if rec.Auth != AuthKey {
		return nil, fmt.Errorf("%w: endpoint %s has auth %s: it has no key to rotate", daemon.ErrConflict, name, rec.Auth)
	}
	key, hash := newKey()
	rec.KeyHash, rec.KeyHint, rec.KeyRotatedAt = hash, key[:len(keyPrefix)+4], time.Now().UTC()
	b, _ := json.Marshal(rec)
	rev, err = t.e.endpoints.Update(ctx, name, b, rev)
	if err != nil {
		return nil, fmt.Errorf("%w: endpoint %s changed meanwhile, try again: %v", daemon.ErrConflict, name, err)
	}
	t.awaitRoutes(name, rev)
	t.log.Info("endpoint key rotated", "endpoint", name, "key_hint", rec.KeyHint)
	out := rec.Endpoint
	out.Key = key
	return &out, nil
}

// routes is the functions listener's table: endpoints by path prefix,
// kept current by a watch on the bucket (so every node sees every
// change).
type routes struct {
	mu       sync.RWMutex
	byName   map[string]*endpointRecord
	revision map[string]uint64 // of each endpoint's record in force
	prefixes []*endpointRecord // longest prefix first
}

// await waits (briefly) until the table has name's record at revision rev
// or later (rev 0: until name is gone), so a change made on this node is
// in force here when it is answered: a rotated key stops working at once.
func (r *routes) await(name string, rev uint64) {
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		r.mu.RLock()
		got, ok := r.revision[name]
		r.mu.RUnlock()
		if rev == 0 && !ok || rev > 0 && got >= rev {
			return
		}
	}
}

// awaitRoutes waits until this node's functions listener (if it has one)
// serves name at revision rev.
func (t *Triggers) awaitRoutes(name string, rev uint64) {
	t.mu.Lock()
	r := t.routes
	t.mu.Unlock()
	if r != nil {
		r.await(name, rev)
	}
}

// watchEndpoints keeps r current until ctx ends; it returns once the
// bucket's current content is loaded.
func (t *Triggers) watchEndpoints(ctx context.Context, r *routes) error {
	w, err := t.e.endpoints.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("%w: watch endpoints: %v", ErrEngine, err)
	}
	loaded := make(chan struct{})
	go func() {
		defer func() { _ = w.Stop() }()
		first := true
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				if e == nil { // the current content is in
					if first {
						first = false
						close(loaded)
					}
					continue
				}
				r.apply(e, t)
			}
		}
	}()
	select {
	case <-loaded:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(30 * time.Second):
		return fmt.Errorf("%w: endpoints did not load in 30 s", ErrEngine)
	}
}

func (r *routes) apply(e jetstream.KeyValueEntry, t *Triggers) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byName == nil {
		r.byName, r.revision = map[string]*endpointRecord{}, map[string]uint64{}
	}
	switch e.Operation() {
	case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
		delete(r.byName, e.Key())
		delete(r.revision, e.Key())
	default:
		var rec endpointRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			t.log.Error("endpoint is malformed; not served", "endpoint", e.Key(), "err", err)
			delete(r.byName, e.Key())
			delete(r.revision, e.Key())
			break
		}
		r.byName[e.Key()] = &rec
		r.revision[e.Key()] = e.Revision()
	}
	r.prefixes = r.prefixes[:0]
	for _, rec := range r.byName {
		r.prefixes = append(r.prefixes, rec)
	}
	sort.Slice(r.prefixes, func(i, j int) bool {
		a, b := r.prefixes[i].PathPrefix, r.prefixes[j].PathPrefix
		if len(a) != len(b) {
			return len(a) > len(b)
		}
		return a < b
	})
}

// match is the endpoint serving path: the longest prefix that is the
// path or ends where one of its segments does.
func (r *routes) match(path string) *endpointRecord {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, rec := range r.prefixes {
		p := rec.PathPrefix
		if path == p || strings.HasPrefix(path, p+"/") {
			return rec
		}
	}
	return nil
}
