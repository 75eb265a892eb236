// Package pypitest runs a real Python package index for tests: pypiserver
// over a directory the test chooses, on 127.0.0.1 at a free port, and gives
// them the wheels scripts/install-deps.sh downloaded once from PyPI
// (scripts/test-packages.txt) and wheels it fabricates (Wheel). Tests never
// reach the network: everything is served from this machine.
//
// pypiserver is $THAW_PYPISERVER, else $THAW_CACHE/pypiserver/<Version>/bin/pypi-server;
// the downloaded packages are in $THAW_WHEELS, else $THAW_CACHE/wheels.
// With the variable set (make test sets both) a missing one fails the
// test; without it the test is skipped and says how to get them.
package pypitest

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/tcptest"
	"github.com/thaw-dev/thaw/internal/thawcache"
)

// Version is the pypiserver scripts/install-deps.sh installs.
const Version = "2.4.2"

// Binary finds pypi-server, failing or skipping t as the package doc says.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("THAW_PYPISERVER"); p != "" {
		if st, err := os.Stat(p); err != nil || st.Mode()&0o111 == 0 {
			t.Fatalf("THAW_PYPISERVER=%s is not an executable pypi-server (run scripts/install-deps.sh)", p)
		}
		return p
	}
	p := thawcache.Path("pypiserver", Version, "bin", "pypi-server")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("no pypiserver at %s and THAW_PYPISERVER is not set: dependency tests need a real package index (scripts/install-deps.sh installs it; make test makes it mandatory)", p)
	}
	return p
}

// WheelsDir is the directory of the downloaded test packages, failing or
// skipping t as the package doc says.
func WheelsDir(t testing.TB) string {
	t.Helper()
	dir, mandatory := os.Getenv("THAW_WHEELS"), true
	if dir == "" {
		dir, mandatory = thawcache.Path("wheels"), false
	}
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err != nil {
		if mandatory {
			t.Fatalf("THAW_WHEELS=%s holds no complete download of scripts/test-packages.txt (run scripts/install-deps.sh)", dir)
		}
		t.Skipf("no test packages in %s and THAW_WHEELS is not set (scripts/install-deps.sh downloads them; make test makes them mandatory)", dir)
	}
	return dir
}

// Cached is the path of the downloaded file of project (normalized name)
// whose name starts with prefix, e.g. Cached(t, "igraph-1.0.0").
func Cached(t testing.TB, prefix string) string {
	t.Helper()
	dir := WheelsDir(t)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(strings.ToLower(e.Name()), strings.ToLower(prefix)) {
			return filepath.Join(dir, e.Name())
		}
	}
	t.Fatalf("no %s* in %s: is scripts/test-packages.txt downloaded (scripts/install-deps.sh)?", prefix, dir)
	return ""
}

// Copy copies the downloaded files whose names start with the prefixes
// into dir (a directory an index serves).
func Copy(t testing.TB, dir string, prefixes ...string) {
	t.Helper()
	for _, p := range prefixes {
		src := Cached(t, p)
		if err := copyFile(src, filepath.Join(dir, filepath.Base(src))); err != nil {
			t.Fatal(err)
		}
	}
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Index is a running pypiserver.
type Index struct {
	URL string // the simple index: http://127.0.0.1:PORT/simple/
	Dir string // the directory it serves (rescanned on every request)
}

// Start serves dir (files may be added while it runs) until t ends.
func Start(t testing.TB, dir string) *Index {
	t.Helper()
	bin := Binary(t)
	port := tcptest.FreePort(t)
	logPath := filepath.Join(t.TempDir(), "pypiserver.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "-p", fmt.Sprint(port), "-i", "127.0.0.1", "--hash-algo", "sha256",
		"--backend", "simple-dir", "-a", ".", "-P", ".", "--disable-fallback", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start pypiserver: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	ix := &Index{URL: fmt.Sprintf("http://127.0.0.1:%d/simple/", port), Dir: dir}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if resp, err := http.Get(ix.URL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return ix
			}
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(logPath)
			t.Fatalf("pypiserver exited at start: %s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("pypiserver did not answer on %s within 30 s: %s", ix.URL, b)
		}
	}
}

// Serve starts an index over a new directory holding the downloaded files
// whose names start with the prefixes.
func Serve(t testing.TB, prefixes ...string) *Index {
	t.Helper()
	dir := t.TempDir()
	Copy(t, dir, prefixes...)
	return Start(t, dir)
}
