package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/thaw-dev/thaw/internal/privfile"
)

// TokenFileName is the generated token's file in the data directory.
const TokenFileName = "token"

// minTokenLen keeps guessable tokens out: a generated one has 64
// characters (32 random bytes in hex).
const minTokenLen = 32

// tokenRE is RFC 6750's b64token, what a Bearer header can carry.
var tokenRE = regexp.MustCompile(`^[A-Za-z0-9._~+/-]+=*$`)

// LoadOrCreateToken returns the token in dataDir/token, creating it (32
// random bytes in hex, mode 0600, O_EXCL) if it does not exist; created
// says it did. An existing file is checked like ReadTokenFile.
func LoadOrCreateToken(dataDir string) (token string, created bool, err error) {
	path := filepath.Join(dataDir, TokenFileName)
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, fmt.Errorf("token: %w", err)
	}
	token = hex.EncodeToString(b[:])
	err = privfile.Create(path, []byte(token+"\n"))
	if errors.Is(err, fs.ErrExist) {
		token, err = ReadTokenFile(path)
		return token, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("token %s: %w", path, err)
	}
	return token, true, nil
}

// ReadTokenFile reads a token file. It must be a regular file (not a
// symbolic link) owned by the daemon's user and not accessible to group or
// others, holding one token of at least 32 characters.
func ReadTokenFile(path string) (string, error) {
	b, err := privfile.Read(path, 4096)
	if errors.Is(err, privfile.ErrUnsafe) {
		return "", fmt.Errorf("token file %w", err)
	}
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minTokenLen || !tokenRE.MatchString(tok) {
		return "", fmt.Errorf("token file %s: want one token of at least %d characters from A-Z a-z 0-9 - . _ ~ + / (e.g. openssl rand -hex 32)", path, minTokenLen)
	}
	return tok, nil
}
