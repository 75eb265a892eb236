package cluster

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/signing"
)

// Every node gets a key in its data directory before it starts, and the
// trusted keys file lists them all; a wiped data directory gets its key
// back.
func TestProvisionKeys(t *testing.T) {
	c := &Cluster{Dir: t.TempDir()}
	path, err := c.provisionKeys(3)
	if err != nil {
		t.Fatal(err)
	}
	trusted, err := signing.LoadTrusted([]string{path})
	if err != nil || len(trusted) != 3 {
		t.Fatalf("trusted keys: %d, %v", len(trusted), err)
	}
	for i, k := range trusted {
		own, err := signing.ReadKeyFile(filepath.Join(nodeDataDir(c.Dir, i+1), signing.KeyFileName))
		if err != nil || own.Public().ID() != k.ID() || k.Comment != nodeName(i+1) {
			t.Fatalf("node %d: %v, listed %s %q", i+1, err, k.ID(), k.Comment)
		}
	}
	data := nodeDataDir(c.Dir, 2)
	restore, err := keepKey(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(data); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(data, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := restore(); err != nil {
		t.Fatal(err)
	}
	if k, err := signing.ReadKeyFile(filepath.Join(data, signing.KeyFileName)); err != nil || k.Public().ID() != trusted[1].ID() {
		t.Fatalf("key after the wipe: %v", err)
	}
}
