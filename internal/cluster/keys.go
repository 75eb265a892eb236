package cluster

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/thaw-dev/thaw/internal/signing"
)

// TrustedKeysFile, in the cluster's directory, lists every node's registry
// signing key; each node trusts it (thawd --registry-trusted-keys), so
// what one node publishes the others import.
const TrustedKeysFile = "registry-keys"

func nodeName(i int) string                { return fmt.Sprintf("node-%d", i) }
func nodeDir(dir string, i int) string     { return filepath.Join(dir, nodeName(i)) }
func nodeDataDir(dir string, i int) string { return filepath.Join(nodeDir(dir, i), "data") }

// provisionKeys makes the registry signing key of nodes 1 to n in their
// data directories before they start, as an operator provisions a
// cluster ('thawd registry key' on each host), and writes their public
// lines to TrustedKeysFile, whose path it returns.
func (c *Cluster) provisionKeys(n int) (string, error) {
	var b strings.Builder
	b.WriteString("# registry signing keys of the cluster's nodes (thawd --registry-trusted-keys)\n")
	for i := 1; i <= n; i++ {
		data := nodeDataDir(c.Dir, i)
		if err := os.MkdirAll(data, 0o700); err != nil {
			return "", err
		}
		k, _, err := signing.LoadOrCreateKey(filepath.Join(data, signing.KeyFileName))
		if err != nil {
			return "", fmt.Errorf("%s: %w", nodeName(i), err)
		}
		pub := k.Public()
		pub.Comment = nodeName(i)
		b.WriteString(pub.String() + "\n")
	}
	path := filepath.Join(c.Dir, TrustedKeysFile)
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// keepKey reads the node's signing key file, if it has one, so a wipe of
// its data directory can put it back (restore): a wiped node keeps its
// identity, which the other nodes trust.
func keepKey(dataDir string) (restore func() error, err error) {
	path := filepath.Join(dataDir, signing.KeyFileName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return func() error { return nil }, nil
	}
	if err != nil {
		return nil, err
	}
	return func() error { return os.WriteFile(path, b, 0o600) }, nil
}
