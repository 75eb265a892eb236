// Package signing holds a node's ed25519 key and the envelope that signs
// what nodes publish to the snapshot registry: a record's exact bytes,
// bound to the kind and object name it was written for and to the key id
// that signed it (docs/snapshot-format.md, "Signed records").
//
// A node's Key lives in its data directory (KeyFileName, PKCS#8 PEM, mode
// 0600, created at first start); its PublicKey is a line other nodes list
// as trusted, like an authorized_keys line:
//
//	thaw-ed25519 <base64 of the 32-byte key> [comment]
//
// Seal wraps a record in an Envelope; Open verifies one against a Keyring
// and returns the record's bytes, or a *Refusal saying why they are not
// trusted. Nothing in this package reaches the network.
package signing

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/thaw-dev/thaw/internal/privfile"
)

// KeyFileName is a node's signing key in its data directory.
const KeyFileName = "registry.key"

// KeyType is the first word of a public key line.
const KeyType = "thaw-ed25519"

// ErrKeyFile: a key file that cannot be used (unreadable, open to others,
// not one ed25519 key).
var ErrKeyFile = errors.New("signing key file unusable")

// PublicKey is the public half of a node's signing key.
type PublicKey struct {
	Key     ed25519.PublicKey
	Comment string // the rest of its line; "" when none
}

// ID names the key in envelopes: the first 8 bytes of the SHA-256 of the
// key, in hex.
func (k PublicKey) ID() string {
	s := sha256.Sum256(k.Key)
	return hex.EncodeToString(s[:8])
}

// String is the key's line: "thaw-ed25519 BASE64", then the comment if
// any.
func (k PublicKey) String() string {
	s := KeyType + " " + base64.StdEncoding.EncodeToString(k.Key)
	if k.Comment != "" {
		s += " " + k.Comment
	}
	return s
}

// ParsePublicKey parses a key line: "thaw-ed25519 BASE64 [comment]".
func ParsePublicKey(line string) (PublicKey, error) {
	f := strings.Fields(line)
	if len(f) < 2 || f[0] != KeyType {
		return PublicKey{}, fmt.Errorf("want %q, a space and the key in base64 (then an optional comment)", KeyType)
	}
	b, err := base64.StdEncoding.Strict().DecodeString(f[1])
	if err != nil || len(b) != ed25519.PublicKeySize {
		return PublicKey{}, fmt.Errorf("key %q: not %d bytes in base64", f[1], ed25519.PublicKeySize)
	}
	return PublicKey{Key: ed25519.PublicKey(b), Comment: strings.Join(f[2:], " ")}, nil
}

// Key is a node's signing key.
type Key struct {
	priv ed25519.PrivateKey
}

// GenerateKey makes a new key from r (crypto/rand when nil).
func GenerateKey(r io.Reader) (*Key, error) {
	if r == nil {
		r = rand.Reader
	}
	_, priv, err := ed25519.GenerateKey(r)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	return &Key{priv: priv}, nil
}

// Public is the key's public half, without a comment.
func (k *Key) Public() PublicKey {
	return PublicKey{Key: k.priv.Public().(ed25519.PublicKey)}
}

// sign signs msg.
func (k *Key) sign(msg []byte) []byte { return ed25519.Sign(k.priv, msg) }

// LoadOrCreateKey returns the key in path, creating it (mode 0600, O_EXCL,
// synced) if there is none; created says it did. An existing file is
// checked as ReadKeyFile does.
func LoadOrCreateKey(path string) (k *Key, created bool, err error) {
	if k, err = GenerateKey(nil); err != nil {
		return nil, false, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(k.priv)
	if err != nil {
		return nil, false, fmt.Errorf("signing key: %w", err)
	}
	err = privfile.Create(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}))
	if errors.Is(err, fs.ErrExist) {
		k, err = ReadKeyFile(path)
		return k, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("signing key %s: %w", path, err)
	}
	return k, true, nil
}

// ReadKeyFile reads a signing key: a regular file (not a symbolic link)
// owned by this process's user, readable by nobody else, holding one
// PKCS#8 ed25519 private key in PEM ("openssl genpkey -algorithm ed25519"
// writes one).
func ReadKeyFile(path string) (*Key, error) {
	b, err := privfile.Read(path, 16<<10)
	if errors.Is(err, privfile.ErrUnsafe) {
		return nil, fmt.Errorf("%w: %w", ErrKeyFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	blk, rest := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" || strings.TrimSpace(string(rest)) != "" {
		return nil, fmt.Errorf("%w: %s: want one PEM block \"PRIVATE KEY\" (PKCS#8)", ErrKeyFile, path)
	}
	parsed, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrKeyFile, path, err)
	}
	priv, ok := parsed.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("%w: %s holds a %T, not an ed25519 key", ErrKeyFile, path, parsed)
	}
	return &Key{priv: priv}, nil
}
