package secrets

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/thaw-dev/thaw/internal/atomicfile"
	"github.com/thaw-dev/thaw/internal/privfile"
)

// KeyFileName is the store key's file in the data directory: 32 random
// bytes in hex and a newline, mode 0600, created at the first secret.
const KeyFileName = "secrets.key"

// keys are what the store key derives: the secretbox key of the store
// file, the HMAC key of the digests the API shows, and the key's id (the
// store file names the key it was sealed with).
type keys struct {
	seal   [32]byte
	digest [32]byte
	id     [8]byte
}

func deriveKeys(master []byte) *keys {
	prf := func(label string) []byte {
		m := hmac.New(sha256.New, master)
		m.Write([]byte("thaw secrets v1: " + label))
		return m.Sum(nil)
	}
	var k keys
	copy(k.seal[:], prf("secretbox key"))
	copy(k.digest[:], prf("digest key"))
	copy(k.id[:], prf("key id"))
	return &k
}

// readKey reads a key file: a regular file (not a link) owned by this
// process's user, readable and writable by nobody else, holding 64 hex
// digits. fs.ErrNotExist if there is none.
func readKey(path string) ([]byte, error) {
	b, err := privfile.Read(path, 256)
	if errors.Is(err, privfile.ErrUnsafe) {
		return nil, fmt.Errorf("%w: key file %w", ErrKeyFile, err)
	}
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSuffix(string(b), "\n"))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("%w: key file %s does not hold 64 hex digits", ErrKeyFile, path)
	}
	return key, nil
}

// createKey writes a new random key to path (O_EXCL, 0600, synced).
func createKey(path string) ([]byte, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("key: %w", err)
	}
	if err := privfile.Create(path, []byte(hex.EncodeToString(key)+"\n")); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if err := atomicfile.Sync(filepath.Dir(path)); err != nil {
		_ = os.Remove(path)
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return key, nil
}

// keyExists says whether path names anything (a key file, or something
// readKey will refuse).
func keyExists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
