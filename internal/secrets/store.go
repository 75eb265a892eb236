// Package secrets is thaw's secret store and the scan that keeps secrets
// out of snapshots. Secrets are named values a function receives in its
// environment when a VM is restored from a snapshot, never at boot, so no
// snapshot holds them. The store keeps them sealed (NaCl secretbox) in one
// file in the data directory under a key file beside it; the API sees
// names, versions and keyed digests, never values. The scan (scan.go)
// searches a snapshot's files for every value the store holds, raw and
// encoded, before the snapshot is published.
package secrets

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/thaw-dev/thaw/internal/atomicfile"
)

// Errors. Callers map them to their own.
var (
	// ErrNotFound: no secret by that name.
	ErrNotFound = errors.New("secret not found")
	// ErrInvalid: a malformed name or value, or the store is full.
	ErrInvalid = errors.New("invalid secret")
	// ErrKeyFile: the key file is missing, unsafe or not the store's.
	ErrKeyFile = errors.New("secret store key file unusable")
	// ErrCorrupt: the store file does not decode or authenticate.
	ErrCorrupt = errors.New("secret store corrupt")
)

// Bounds.
const (
	// MinValueBytes: a shorter value could not be told from chance bytes
	// in a snapshot's memory, so the scan could not keep it out.
	MinValueBytes = 8
	// MaxValueBytes bounds one value.
	MaxValueBytes = 64 << 10
	// MaxSecrets bounds the store.
	MaxSecrets = 256
)

var nameRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_-]{0,62}$`)

// ValidName checks a secret's name: 1-63 letters, digits, '_' and '-',
// starting with a letter.
func ValidName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: secret name %q: use 1-63 letters, digits, '_' and '-', starting with a letter", ErrInvalid, name)
	}
	return nil
}

// ValidValue checks a value: UTF-8 text of MinValueBytes to MaxValueBytes
// bytes without NUL (it is delivered as an environment variable). The
// error never quotes the value.
func ValidValue(v []byte) error {
	switch {
	case len(v) < MinValueBytes:
		return fmt.Errorf("%w: value of %d bytes: a secret has at least %d (a shorter one cannot be told apart from chance bytes in guest memory)", ErrInvalid, len(v), MinValueBytes)
	case len(v) > MaxValueBytes:
		return fmt.Errorf("%w: value of %d bytes: at most %d", ErrInvalid, len(v), MaxValueBytes)
	case !utf8.Valid(v):
		return fmt.Errorf("%w: value is not UTF-8 text (encode binary values, e.g. in base64)", ErrInvalid)
	}
	for i, c := range v {
		if c == 0 {
			return fmt.Errorf("%w: value has a NUL byte at offset %d; environment variables cannot hold one", ErrInvalid, i)
		}
	}
	return nil
}

// Info is what may be shown of a secret: never its value.
type Info struct {
	Name    string
	Version int // 1 at the first set, one more at every set after
	// Digest is HMAC-SHA256 of the value under a key derived from the
	// store key (hex): equal values have equal digests in one store, and
	// without the key file a digest says nothing about the value.
	Digest    string
	CreatedAt time.Time
	UpdatedAt time.Time
}

type entry struct {
	name      string
	value     []byte
	version   int
	digest    string
	createdAt time.Time
	updatedAt time.Time
}

func newEntry(k *keys, name string, value []byte, version int, created, updated time.Time) *entry {
	m := hmac.New(sha256.New, k.digest[:])
	m.Write(value)
	return &entry{name: name, value: value, version: version, digest: hex.EncodeToString(m.Sum(nil)),
		createdAt: created, updatedAt: updated}
}

func (e *entry) info() Info {
	return Info{Name: e.name, Version: e.version, Digest: e.digest, CreatedAt: e.createdAt, UpdatedAt: e.updatedAt}
}

// Store is the secret store of one data directory. Its methods are safe
// for concurrent use.
type Store struct {
	dir string

	mu      sync.Mutex
	keys    *keys // nil until the key file exists
	secrets map[string]*entry
	gen     uint64   // bumped by every change
	scanner *Scanner // for gen, built on first use
	scanGen uint64
}

// Open opens the store in dir: the key file and the sealed store, if they
// exist. A store file without its key, a key file group or others may
// read, and a store that does not authenticate are errors. Without either
// file the store is empty; the key is created by the first Set.
func Open(dir string) (*Store, error) {
	s := &Store{dir: dir, secrets: map[string]*entry{}}
	keyPath, storePath := filepath.Join(dir, KeyFileName), filepath.Join(dir, StoreFileName)
	// What a write that did not finish left: never the store itself.
	leftovers, _ := filepath.Glob(filepath.Join(dir, "."+StoreFileName+".tmp-*"))
	for _, p := range leftovers {
		_ = os.Remove(p)
	}
	b, err := readStore(storePath)
	if err != nil {
		return nil, err
	}
	if !keyExists(keyPath) {
		if b != nil {
			return nil, fmt.Errorf("%w: %s exists but its key %s does not: restore the key file from the backup it was saved with", ErrKeyFile, storePath, keyPath)
		}
		return s, nil
	}
	master, err := readKey(keyPath)
	if err != nil {
		return nil, err
	}
	s.keys = deriveKeys(master)
	if b != nil {
		s.secrets, err = open(s.keys, b)
		switch {
		case errors.Is(err, ErrKeyFile):
			err = s.finishRotation(b)
		case err == nil:
			_ = os.Remove(keyPath + newKeySuffix) // a rotation that failed before its store was written
		}
		if err != nil {
			return nil, fmt.Errorf("secret store %s: %w", storePath, err)
		}
	}
	return s, nil
}

// newKeySuffix names the new key while a rotation is under way.
const newKeySuffix = ".new"

// RotateKey seals the store under a new random key and makes it the key
// file's: the new key is written beside the old one, the store sealed
// under it and renamed into place, then the new key renamed over the old.
// A crash between the last two steps is finished by the next Open. The
// digests change with the key; the values and versions do not.
func (s *Store) RotateKey() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	keyPath := filepath.Join(s.dir, KeyFileName)
	if s.keys == nil {
		return fmt.Errorf("%w: there is no key yet (it is made with the first secret)", ErrKeyFile)
	}
	_ = os.Remove(keyPath + newKeySuffix) // a rotation that failed before its store was written
	master, err := createKey(keyPath + newKeySuffix)
	if err != nil {
		return err
	}
	k := deriveKeys(master)
	next := make(map[string]*entry, len(s.secrets))
	for n, e := range s.secrets {
		next[n] = newEntry(k, n, e.value, e.version, e.createdAt, e.updatedAt)
	}
	old := s.keys
	s.keys = k
	if err := s.write(next); err != nil {
		s.keys = old
		_ = os.Remove(keyPath + newKeySuffix)
		return err
	}
	s.secrets = next
	s.gen++
	if err := os.Rename(keyPath+newKeySuffix, keyPath); err != nil {
		return fmt.Errorf("key file: %w (the store is sealed under %s%s; the next start finishes the rotation)", err, keyPath, newKeySuffix)
	}
	return atomicfile.Sync(filepath.Dir(keyPath))
}

// finishRotation opens a store sealed under the new key of a rotation
// that stopped before the key was renamed into place, and renames it.
func (s *Store) finishRotation(b []byte) error {
	keyPath := filepath.Join(s.dir, KeyFileName)
	master, err := readKey(keyPath + newKeySuffix)
	if err != nil {
		return fmt.Errorf("%w: the store was sealed with another key than %s holds, and no rotation's new key is usable: %v", ErrKeyFile, KeyFileName, err)
	}
	k := deriveKeys(master)
	secrets, err := open(k, b)
	if err != nil {
		return err
	}
	if err := os.Rename(keyPath+newKeySuffix, keyPath); err != nil {
		return fmt.Errorf("finish a key rotation: %w", err)
	}
	s.keys, s.secrets = k, secrets
	return atomicfile.Sync(filepath.Dir(keyPath))
}

// Set stores value under name (a new secret, or a new version of one) and
// returns what may be shown of it; created says it is new. The store file
// is written before anything changes in memory.
func (s *Store) Set(name string, value []byte, now time.Time) (info Info, created bool, err error) {
	if err := ValidName(name); err != nil {
		return Info{}, false, err
	}
	if err := ValidValue(value); err != nil {
		return Info{}, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, exists := s.secrets[name]
	if !exists && len(s.secrets) >= MaxSecrets {
		return Info{}, false, fmt.Errorf("%w: the store holds %d secrets, the most it takes", ErrInvalid, MaxSecrets)
	}
	if s.keys == nil {
		master, err := createKey(filepath.Join(s.dir, KeyFileName))
		if err != nil {
			return Info{}, false, err
		}
		s.keys = deriveKeys(master)
	}
	e := newEntry(s.keys, name, append([]byte(nil), value...), 1, now, now)
	if exists {
		e.version, e.createdAt = old.version+1, old.createdAt
	}
	next := make(map[string]*entry, len(s.secrets)+1)
	for k, v := range s.secrets {
		next[k] = v
	}
	next[name] = e
	if err := s.write(next); err != nil {
		return Info{}, false, err
	}
	s.secrets = next
	s.gen++
	return e.info(), !exists, nil
}

// Delete removes a secret (its version count starts again if it is set
// again).
func (s *Store) Delete(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.secrets[name]; !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	next := make(map[string]*entry, len(s.secrets))
	for k, v := range s.secrets {
		if k != name {
			next[k] = v
		}
	}
	if err := s.write(next); err != nil {
		return err
	}
	s.secrets = next
	s.gen++
	return nil
}

func (s *Store) write(secrets map[string]*entry) error {
	b, err := seal(s.keys, secrets)
	if err != nil {
		return fmt.Errorf("seal secret store: %w", err)
	}
	if err := atomicfile.WriteFile(filepath.Join(s.dir, StoreFileName), b); err != nil {
		return fmt.Errorf("write secret store: %w", err)
	}
	return nil
}

// Get returns what may be shown of one secret.
func (s *Store) Get(name string) (Info, error) {
	if err := ValidName(name); err != nil {
		return Info{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.secrets[name]
	if !ok {
		return Info{}, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	return e.info(), nil
}

// List returns what may be shown of every secret, by name.
func (s *Store) List() []Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, len(s.secrets))
	for _, e := range s.secrets {
		out = append(out, e.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Missing returns the names that are not in the store, sorted.
func (s *Store) Missing(names []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range names {
		if _, ok := s.secrets[n]; !ok {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Value is a secret's value with its digest, for delivery to a guest.
type Value struct {
	Name   string
	Value  []byte
	Digest string
}

// Values returns the current values of the named secrets, in the order
// given; a name the store lacks is ErrNotFound.
func (s *Store) Values(names []string) ([]Value, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Value, len(names))
	for i, n := range names {
		e, ok := s.secrets[n]
		if !ok {
			return nil, fmt.Errorf("%w: %q", ErrNotFound, n)
		}
		out[i] = Value{Name: n, Value: e.value, Digest: e.digest}
	}
	return out, nil
}

// Digest is the current digest of a secret ("" if there is none).
func (s *Store) Digest(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.secrets[name]; ok {
		return e.digest
	}
	return ""
}

// Len is how many secrets the store holds.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.secrets)
}

// Scanner returns a scanner for every value the store holds now (built
// once per change of the store).
func (s *Store) Scanner() *Scanner {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.scanner == nil || s.scanGen != s.gen {
		var pats []Pattern
		for _, e := range s.secrets {
			pats = append(pats, Patterns(e.name, e.value)...)
		}
		s.scanner, s.scanGen = NewScanner(pats), s.gen
	}
	return s.scanner
}
