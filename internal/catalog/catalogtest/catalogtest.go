// Package catalogtest opens catalogs for tests.
package catalogtest

import (
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// Open opens the catalog dir/catalog.db, closed when the test ends.
func Open(t testing.TB, dir string) *catalog.DB {
	t.Helper()
	db, err := catalog.Open(filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}
