// Package clitest runs thaw's commands in the tests of their packages: a
// fake daemon that records what it is asked, and a run of a command under
// a root with thaw's global flags, exit codes and error reports.
package clitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/spf13/cobra"

	"github.com/thaw-dev/thaw/cmd/thaw/internal/cli"
)

// Daemon is a fake thawd: an HTTP server over a handler that records each
// request as "METHOD /path?query".
type Daemon struct {
	*httptest.Server
	mu       sync.Mutex
	requests []string
}

// NewDaemon starts a Daemon serving h, closed when the test ends.
func NewDaemon(t testing.TB, h http.Handler) *Daemon {
	t.Helper()
	d := &Daemon{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.requests = append(d.requests, r.Method+" "+r.URL.RequestURI())
		d.mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

// Answer is a handler that answers every request with status and the JSON
// body, as thawd answers.
func Answer(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// Count is how many requests the daemon was sent.
func (d *Daemon) Count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.requests)
}

// Asked says whether the daemon was sent req ("METHOD /path?query").
func (d *Daemon) Asked(req string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.requests {
		if r == req {
			return true
		}
	}
	return false
}

// Result is how a run of thaw ended.
type Result struct {
	Code           int
	Stdout, Stderr string
}

// Run runs "thaw --url URL args..." with stdin, where thaw has the one
// command newCmd makes, against the daemon.
func (d *Daemon) Run(t testing.TB, stdin string, newCmd func(*cli.App) *cobra.Command, args ...string) Result {
	t.Helper()
	var out, errb bytes.Buffer
	a := &cli.App{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb}
	root := cli.NewRoot(a, "thaw", "thaw", "")
	root.AddCommand(newCmd(a))
	a.WrapRunE(root)
	args = append([]string{"--url", d.URL}, args...)
	code := a.Execute(context.Background(), root, args)
	t.Logf("thaw %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, out.String(), errb.String())
	return Result{code, out.String(), errb.String()}
}

// WantCode fails the test at once unless r ended with code.
func WantCode(t testing.TB, r Result, code int) {
	t.Helper()
	if r.Code != code {
		t.Fatalf("exit code %d, want %d (stderr: %q)", r.Code, code, r.Stderr)
	}
}

// WantContains fails the test unless s, named what, contains every sub.
func WantContains(t testing.TB, what, s string, subs ...string) {
	t.Helper()
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			t.Errorf("%s does not contain %q:\n%s", what, sub, s)
		}
	}
}
