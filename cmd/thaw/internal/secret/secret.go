package secret

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
	"github.com/thaw-dev/thaw/cmd/thaw/internal/output"
)

// maxSecretInput is read at most, so an oversized value is refused by the
// daemon with its bound instead of read whole.
const maxSecretInput = 64<<10 + 1

func (a *app) newSecretCmd() *cobra.Command {
	cmd := cli.NewGroupCmd("secret", "Set, list, show and delete secrets",
		`A secret is a named value a function receives in its environment when a VM
is restored from a snapshot, never at boot, so no snapshot holds it. A
function names its secrets at create (thaw function create --secret
ENV=NAME); a new value takes effect at its next cold start, without a new
snapshot. thaw and the daemon show a secret's version and a keyed digest of
its value, never the value.`)
	cmd.AddCommand(a.newSecretSetCmd(), a.newSecretListCmd(), a.newSecretGetCmd(), a.newSecretDeleteCmd())
	return cmd
}

func (a *app) newSecretSetCmd() *cobra.Command {
	var fromFile string
	cmd := &cobra.Command{
		Use:   "set NAME [--from-file FILE]",
		Short: "Set a secret's value (a new secret, or its next version)",
		Long: `Set a secret's value: a new secret (version 1), or its next version.

The value is read from standard input, without one trailing newline (so
'echo VALUE | thaw secret set NAME' sets VALUE); on a terminal it is asked
for without echo. With --from-file it is the file's bytes, exactly. It
must be UTF-8 text of 8 bytes to 64 KiB without NUL bytes.

Functions that reference the secret get the new value at their next cold
start; their idle VMs holding the old value are stopped.`,
		Example: `  printf %s "$DB_PASSWORD" | thaw secret set db-password
  thaw secret set tls-key --from-file ./key.pem
  thaw function create app --dir ./app --secret DB_PASSWORD=db-password`,
		Args: cli.ExactArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			value, err := a.secretValue(args[0], fromFile)
			if err != nil {
				return err
			}
			s, err := a.C.SetSecret(a.Ctx, args[0], value)
			if err != nil {
				return err
			}
			return a.printSecret(s, "set secret")
		},
	}
	cmd.Flags().StringVar(&fromFile, "from-file", "", "read the value from FILE (exactly its bytes) instead of standard input")
	_ = cmd.MarkFlagFilename("from-file")
	return cmd
}

// secretValue reads a secret's value: the file's bytes, or standard input
// without one trailing newline (asked for without echo on a terminal).
func (a *app) secretValue(name, fromFile string) ([]byte, error) {
	if fromFile != "" {
		f, err := os.Open(fromFile)
		if err != nil {
			return nil, fmt.Errorf("secret value: %w", err)
		}
		defer f.Close()
		return io.ReadAll(io.LimitReader(f, maxSecretInput))
	}
	in := a.Stdin
	if f, ok := in.(*os.File); ok {
		if restore, err := noEcho(f); err == nil {
			fmt.Fprintf(a.Stderr, "Value of secret %s: ", name)
			defer func() { restore(); fmt.Fprintln(a.Stderr) }()
			line, err := bufio.NewReader(io.LimitReader(f, maxSecretInput)).ReadBytes('\n')
			if err != nil && err != io.EOF {
				return nil, fmt.Errorf("secret value: %w", err)
			}
			return trimNewline(line), nil
		}
	}
	b, err := io.ReadAll(io.LimitReader(in, maxSecretInput))
	if err != nil {
		return nil, fmt.Errorf("secret value: %w", err)
	}
	if len(b) == 0 {
		return nil, cli.Usagef("no value on standard input: pipe it in, or give --from-file")
	}
	return trimNewline(b), nil
}

func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// noEcho turns the terminal f's echo off; restore turns it back on. An
// error: f is not a terminal.
func noEcho(f *os.File) (restore func(), err error) {
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, err
	}
	quiet := *old
	quiet.Lflag &^= unix.ECHO
	quiet.Lflag |= unix.ICANON | unix.ISIG
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &quiet); err != nil {
		return nil, err
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

func (a *app) newSecretListCmd() *cobra.Command {
	return cli.NewListCmd("secrets", cli.ListRunE(a.App, (*client.Client).ListSecrets,
		[]string{"NAME", "VERSION", "DIGEST", "UPDATED"},
		func(s *client.Secret) []string {
			return []string{s.Name, fmt.Sprint(s.Version), output.ShortDigest(s.Digest), output.FmtAge(s.UpdatedAt)}
		}))
}

func (a *app) newSecretGetCmd() *cobra.Command {
	return cli.NewGetCmd("secret", "NAME", cli.OneRunE(a.App, (*client.Client).GetSecret, func(s *client.Secret) error {
		return a.printSecret(s, "")
	}))
}

func (a *app) newSecretDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "delete NAME...",
		Aliases: []string{"rm"},
		Short:   "Delete secrets no function references",
		Args:    cli.MinArgs("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.DeleteAll("secret", args, a.C.DeleteSecret)
		},
	}
}

// printSecret prints what the daemon shows of a secret (never its value).
func (a *app) printSecret(s *client.Secret, headline string) error {
	return a.PrintObject(s, headline, s.Name, func(w io.Writer) {
		output.Row(w, "Name:", s.Name)
		output.Row(w, "Version:", fmt.Sprint(s.Version))
		output.Row(w, "Digest:", "hmac-sha256:"+s.Digest)
		output.Row(w, "Created:", output.FmtTime(s.CreatedAt))
		output.Row(w, "Updated:", output.FmtTime(s.UpdatedAt))
	})
}
