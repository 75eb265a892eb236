package deps

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// WheelCache keeps downloaded wheels by their SHA-256:
// <dir>/<sha256>/<file name>. A wheel is hashed as it is added and
// published with a rename, so an entry is always complete and its name is
// its content's digest.
type WheelCache struct {
	dir string
}

// OpenWheelCache opens (creating) the cache in dir.
func OpenWheelCache(dir string) (*WheelCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("wheel cache: %w", err)
	}
	return &WheelCache{dir: dir}, nil
}

// Dir is the cache's directory.
func (c *WheelCache) Dir() string { return c.dir }

// Lookup returns the path of the wheel with digest sum, if cached.
func (c *WheelCache) Lookup(sum string) (string, bool) {
	if !hexRE.MatchString(sum) {
		return "", false
	}
	ents, err := os.ReadDir(filepath.Join(c.dir, sum))
	if err != nil {
		return "", false
	}
	for _, e := range ents {
		if e.Type().IsRegular() && filepath.Ext(e.Name()) == ".whl" {
			p := filepath.Join(c.dir, sum, e.Name())
			now := time.Now()
			_ = os.Chtimes(filepath.Join(c.dir, sum), now, now) // last use, for eviction
			return p, true
		}
	}
	return "", false
}

// Add moves the file src (a downloaded wheel) into the cache and returns
// its digest and cached path. An entry that is there already is kept.
func (c *WheelCache) Add(src string) (sum, path string, err error) {
	sum, err = hashFile(src)
	if err != nil {
		return "", "", err
	}
	name := filepath.Base(src)
	if p, ok := c.Lookup(sum); ok {
		_ = os.Remove(src)
		return sum, p, nil
	}
	tmp, err := os.MkdirTemp(c.dir, ".tmp-")
	if err != nil {
		return "", "", fmt.Errorf("wheel cache: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Rename(src, filepath.Join(tmp, name)); err != nil {
		return "", "", fmt.Errorf("wheel cache: %w", err)
	}
	final := filepath.Join(c.dir, sum)
	if err := os.Rename(tmp, final); err != nil && !errors.Is(err, fs.ErrExist) && !isNotEmpty(err) {
		return "", "", fmt.Errorf("wheel cache: %w", err)
	}
	p, ok := c.Lookup(sum)
	if !ok {
		return "", "", fmt.Errorf("wheel cache: %s vanished after it was added", name)
	}
	return sum, p, nil
}

// isNotEmpty: a rename onto a directory another writer filled first.
func isNotEmpty(err error) bool { return errors.Is(err, syscall.ENOTEMPTY) }

func hashFile(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
