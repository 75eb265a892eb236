package thawcache

import (
	"path/filepath"
	"testing"
)

// THAW_CACHE names the cache; without it, it is ~/.cache/thaw.
func TestPath(t *testing.T) {
	t.Setenv("THAW_CACHE", "/somewhere/cache")
	if got := Path("minio", "v1", "minio"); got != "/somewhere/cache/minio/v1/minio" {
		t.Errorf("with THAW_CACHE: %s", got)
	}
	if got := Path(); got != "/somewhere/cache" {
		t.Errorf("the directory itself: %s", got)
	}
	t.Setenv("THAW_CACHE", "")
	t.Setenv("HOME", "/home/someone")
	if got, want := Path("images", "current"), filepath.Join("/home/someone", ".cache", "thaw", "images", "current"); got != want {
		t.Errorf("without THAW_CACHE: %s, want %s", got, want)
	}
}
