package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/internal/signing"
)

// registryCmd is 'thawd registry': the node's registry signing key.
func (c *command) registryCmd() *cobra.Command {
	reg := groupCmd("registry", "The node's snapshot registry signing key")
	reg.AddCommand(&cobra.Command{
		Use:   "key",
		Short: "Print the node's registry signing key, creating it if the data directory has none",
		Long: `Print the public half of the node's registry signing key (<data-dir>/` + signing.KeyFileName + `,
created here or at the daemon's first start, mode 0600) as one line:

  thaw-ed25519 <base64> <node name>

Every snapshot manifest and function record the node pushes is signed with
this key. Add the line to the other nodes' --registry-trusted-keys (a file of
such lines, or the line itself) so that they pull and import what this node
publishes. Run it before the first start to provision a cluster's keys.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return c.printRegistryKey() },
	})
	return reg
}

// printRegistryKey loads the configuration, then the data directory's key
// (creating it), and prints its line.
func (c *command) printRegistryKey() error {
	if err := c.loadValid(); err != nil {
		return err
	}
	dir := c.s.serve.Daemon.DataDir
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fmt.Fprintf(c.stderr, "thawd: data dir: %v\n", err)
		return &exitError{code: exitFailed}
	}
	path := filepath.Join(dir, signing.KeyFileName)
	k, created, err := signing.LoadOrCreateKey(path)
	if err != nil {
		fmt.Fprintf(c.stderr, "thawd: %v\n", err)
		return &exitError{code: exitFailed}
	}
	pub := k.Public()
	if pub.Comment = c.s.serve.NodeName; pub.Comment == "" {
		pub.Comment, _ = os.Hostname()
	}
	if created {
		fmt.Fprintf(c.stderr, "thawd: created %s\n", path)
	}
	fmt.Fprintln(c.stdout, pub.String())
	return nil
}
