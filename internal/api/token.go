package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
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
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if errors.Is(err, fs.ErrExist) {
		token, err = ReadTokenFile(path)
		return token, false, err
	}
	if err != nil {
		return "", false, fmt.Errorf("token %s: %w", path, err)
	}
	_, werr := f.WriteString(token + "\n")
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		_ = os.Remove(path)
		return "", false, fmt.Errorf("token %s: %w", path, werr)
	}
	return token, true, nil
}

// ReadTokenFile reads a token file. It must be a regular file (not a
// symbolic link) owned by the daemon's user and not accessible to group or
// others, holding one token of at least 32 characters.
func ReadTokenFile(path string) (string, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return "", fmt.Errorf("token file %s is a symbolic link; give the file itself", path)
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil { // the file opened, not the name looked at
		return "", fmt.Errorf("token file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("token file %s is not a regular file", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return "", fmt.Errorf("token file %s is accessible to group or others (mode %04o): chmod 600 it", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return "", fmt.Errorf("token file %s is owned by uid %d, not by the daemon's user (%d)", path, st.Uid, os.Geteuid())
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return "", fmt.Errorf("token file %s: %w", path, err)
	}
	tok := strings.TrimSpace(string(b))
	if len(tok) < minTokenLen || !tokenRE.MatchString(tok) {
		return "", fmt.Errorf("token file %s: want one token of at least %d characters from A-Z a-z 0-9 - . _ ~ + / (e.g. openssl rand -hex 32)", path, minTokenLen)
	}
	return tok, nil
}
