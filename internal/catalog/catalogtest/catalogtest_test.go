package catalogtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// The catalog opened is a working one, in the folder named.
func TestOpen(t *testing.T) {
	dir := t.TempDir()
	db := Open(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err != nil {
		t.Fatalf("no catalog file: %v", err)
	}
	ctx := context.Background()
	if err := db.PutFunction(ctx, &catalog.Function{Name: "echo"}); err != nil {
		t.Fatal(err)
	}
	if f, err := db.GetFunction(ctx, "echo"); err != nil || f.Name != "echo" {
		t.Fatalf("get: %+v %v", f, err)
	}
}
