// Package thawcache names the cache that scripts/install-deps.sh and
// make image fill (the guest image, MinIO, nats-server, pypiserver):
// $THAW_CACHE, else ~/.cache/thaw.
package thawcache

import (
	"os"
	"path/filepath"
)

// Path is elem joined below the cache directory.
func Path(elem ...string) string {
	dir := os.Getenv("THAW_CACHE")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "thaw")
	}
	return filepath.Join(append([]string{dir}, elem...)...)
}
