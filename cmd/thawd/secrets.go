package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/internal/daemon"
)

// secretsCmd is thawd secrets: maintenance of the secret store while the
// daemon is stopped.
func (c *command) secretsCmd() *cobra.Command {
	cmd := groupCmd("secrets", "Maintain the secret store of the data directory (thawd stopped)")
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate-key",
		Short: "Seal the secret store under a new key (<data-dir>/secrets.key), thawd stopped",
		Long: `Seal the secret store under a new random key, replacing <data-dir>/secrets.key.
The secrets' values and versions stay; their digests change with the key.
Run it with thawd stopped: it takes the data directory's lock and fails while
a daemon holds it. Back up the new key file afterwards: a copy of the store
with the old key no longer opens.`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := c.loadValid(); err != nil {
				return err
			}
			dir := c.s.serve.Daemon.DataDir
			if err := daemon.RotateSecretKey(dir); err != nil {
				fmt.Fprintf(c.stderr, "thawd: rotate the secret key of %s: %v\n", dir, err)
				return &exitError{code: exitFailed}
			}
			fmt.Fprintf(c.stdout, "sealed the secret store of %s under a new key\n", dir)
			return nil
		},
	})
	return cmd
}
