package secrets

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"syscall"
	"time"

	"golang.org/x/crypto/nacl/secretbox"
)

// StoreFileName is the sealed store in the data directory.
//
// Its format (version 1): the magic "THAWSECR", the format version
// (uint16, big endian), the id of the key it is sealed with (8 bytes, see
// deriveKeys), a random 24-byte nonce, then NaCl secretbox (XSalsa20 and
// Poly1305) of a JSON document holding every secret: its name, version,
// value and times. The whole file is rewritten for every change: written
// to a temporary file, synced and renamed over the old one.
const StoreFileName = "secrets.sealed"

const (
	magic         = "THAWSECR"
	formatVersion = 1
	headerLen     = len(magic) + 2 + 8 + 24
	// maxStoreFile bounds what is read back: MaxSecrets values of
	// MaxValueBytes, escaped, with room for the rest.
	maxStoreFile = 64 << 20
)

// record is one secret in the sealed document.
type record struct {
	Name      string    `json:"name"`
	Version   int       `json:"version"`
	Value     string    `json:"value"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// document is the sealed JSON.
type document struct {
	Format  int      `json:"format"`
	Secrets []record `json:"secrets"`
}

// seal encodes the secrets as the store file's bytes.
func seal(k *keys, secrets map[string]*entry) ([]byte, error) {
	doc := document{Format: formatVersion, Secrets: make([]record, 0, len(secrets))}
	for _, e := range secrets {
		doc.Secrets = append(doc.Secrets, record{Name: e.name, Version: e.version, Value: string(e.value),
			CreatedAt: e.createdAt, UpdatedAt: e.updatedAt})
	}
	sort.Slice(doc.Secrets, func(i, j int) bool { return doc.Secrets[i].Name < doc.Secrets[j].Name })
	payload, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, err
	}
	out := make([]byte, 0, headerLen+len(payload)+secretbox.Overhead)
	out = append(out, magic...)
	out = binary.BigEndian.AppendUint16(out, formatVersion)
	out = append(out, k.id[:]...)
	out = append(out, nonce[:]...)
	return secretbox.Seal(out, payload, &nonce, &k.seal), nil
}

// open decodes a store file's bytes: the header checked first, then the
// box opened (which authenticates everything in it), then every record
// validated as Set would.
func open(k *keys, b []byte) (map[string]*entry, error) {
	if len(b) < headerLen+secretbox.Overhead || string(b[:len(magic)]) != magic {
		return nil, fmt.Errorf("%w: not a thaw secret store", ErrCorrupt)
	}
	if v := binary.BigEndian.Uint16(b[len(magic):]); v != formatVersion {
		return nil, fmt.Errorf("%w: store format %d; this thawd reads format %d", ErrCorrupt, v, formatVersion)
	}
	id := b[len(magic)+2 : len(magic)+10]
	if !bytes.Equal(id, k.id[:]) {
		return nil, fmt.Errorf("%w: the store was sealed with another key than %s holds", ErrKeyFile, KeyFileName)
	}
	var nonce [24]byte
	copy(nonce[:], b[len(magic)+10:headerLen])
	payload, ok := secretbox.Open(nil, b[headerLen:], &nonce, &k.seal)
	if !ok {
		return nil, fmt.Errorf("%w: the store does not authenticate (damaged, or not sealed with this key)", ErrCorrupt)
	}
	var doc document
	if err := json.Unmarshal(payload, &doc); err != nil {
		return nil, fmt.Errorf("%w: sealed document: %v", ErrCorrupt, err)
	}
	if doc.Format != formatVersion {
		return nil, fmt.Errorf("%w: sealed document format %d", ErrCorrupt, doc.Format)
	}
	out := make(map[string]*entry, len(doc.Secrets))
	for _, r := range doc.Secrets {
		if err := ValidName(r.Name); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
		}
		if err := ValidValue([]byte(r.Value)); err != nil {
			return nil, fmt.Errorf("%w: secret %q: %v", ErrCorrupt, r.Name, err)
		}
		if _, dup := out[r.Name]; dup || r.Version < 1 {
			return nil, fmt.Errorf("%w: secret %q appears twice or has version %d", ErrCorrupt, r.Name, r.Version)
		}
		out[r.Name] = newEntry(k, r.Name, []byte(r.Value), r.Version, r.CreatedAt, r.UpdatedAt)
	}
	if len(out) > MaxSecrets {
		return nil, fmt.Errorf("%w: %d secrets, more than %d", ErrCorrupt, len(out), MaxSecrets)
	}
	return out, nil
}

// readStore reads the store file (nil, nil if there is none).
func readStore(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxStoreFile {
		return nil, fmt.Errorf("%w: %s is not a regular file of at most %d bytes", ErrCorrupt, path, maxStoreFile)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("secret store: %w", err)
	}
	return b, nil
}
