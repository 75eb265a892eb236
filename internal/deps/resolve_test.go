package deps

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/deps/pypitest"
	"github.com/thaw-dev/thaw/internal/tcptest"
)

// testManager is a manager over a fresh directory resolving against index
// (a URL, or NoIndex with findLinks).
func testManager(t *testing.T, index string, findLinks ...string) *Manager {
	t.Helper()
	m, err := Open(Options{Dir: filepath.Join(t.TempDir(), "deps"), Python: "python3", IndexURL: index, FindLinks: findLinks,
		Timeout: 2 * time.Second, Retries: 1, Budget: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Resolver.CheckPython(context.Background()); err != nil {
		t.Skipf("no CPython %s with pip on this host: %v", PythonVersion, err)
	}
	return m
}

func resolve(t *testing.T, m *Manager, text string) (*Lock, error) {
	t.Helper()
	reqs, err := ParseRequirements([]byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return m.Resolver.Resolve(context.Background(), reqs)
}

// Real wheels from a real index: a range and a bare name are resolved
// with their dependencies into a hashed lock; the same lock given as the
// requirements resolves again from the cache alone, with the index gone.
func TestResolveRealWheels(t *testing.T) {
	ix := pypitest.Serve(t, "igraph-1.0.0", "texttable-1.7.2", "Chameleon-4.6.0")
	m := testManager(t, ix.URL)
	lock, err := resolve(t, m, "chameleon>=4\nigraph\n")
	if err != nil {
		t.Fatal(err)
	}
	lines := lock.Lines()
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "chameleon==4.6.0 --hash=sha256:f674cab2") ||
		!strings.HasPrefix(lines[1], "igraph==1.0.0 --hash=sha256:2d04c2c7") || !strings.HasPrefix(lines[2], "texttable==1.7.2 --hash=sha256:a381e1ed") {
		t.Fatalf("lock:\n%s", strings.Join(lines, "\n"))
	}
	for _, p := range lock.Pins {
		if _, ok := m.Wheels.Lookup(p.SHA256); !ok {
			t.Errorf("%s not cached", p.File)
		}
	}
	left, _ := os.ReadDir(m.tmp)
	if len(left) != 0 {
		t.Errorf("pip's scratch left: %v", left)
	}

	offline := testManager(t, "http://"+tcptest.FreeAddr(t)+"/simple/")
	offline.Wheels = m.Wheels
	offline.Resolver.Cache = m.Wheels
	again, err := resolve(t, offline, strings.Join(lines, "\n"))
	if err != nil {
		t.Fatalf("a cached lock needs no index: %v", err)
	}
	if again.Digest(FormatErofs) != lock.Digest(FormatErofs) || again.Digest(FormatErofs) == lock.Digest(FormatExt4) {
		t.Fatalf("digests: %s %s", again.Digest(FormatErofs), lock.Digest(FormatErofs))
	}
}

// A pinned line with a hash that is not the wheel's is refused.
func TestResolveHashMismatch(t *testing.T) {
	ix := pypitest.Serve(t, "texttable-1.7.2", "idna-3.20")
	m := testManager(t, ix.URL)
	// A complete lock: pip checks the hashes.
	_, err := resolve(t, m, "texttable==1.7.2 --hash=sha256:"+sumA+"\n")
	wantKind(t, err, ErrHashMismatch, "texttable==1.7.2", "Expected sha256 "+sumA, "Got a381e1ed")
	// Resolved (idna has no hash): thaw checks the hashes given.
	_, err = resolve(t, m, "texttable==1.7.2 --hash=sha256:"+sumA+"\nidna\n")
	wantKind(t, err, ErrHashMismatch, "texttable 1.7.2", "not a hash requirements.txt line 1 gives")
}

func wantKind(t *testing.T, err, kind error, parts ...string) {
	t.Helper()
	if !errors.Is(err, kind) {
		t.Fatalf("error %v, want %v", err, kind)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not mention %q", err, p)
		}
	}
}

// Why a requirement has no wheel: pip says only that it found none, so the
// index is read to tell the cases apart.
func TestResolveExplainsFailures(t *testing.T) {
	dir := t.TempDir()
	pypitest.Copy(t, dir, "pyaes-1.6.1", "texttable-1.7.2")
	pypitest.Wheel{Name: "wrongpy", Version: "1.0", Tag: "cp312-cp312-manylinux_2_17_x86_64"}.Write(t, dir)
	pypitest.Wheel{Name: "wrongpy", Version: "1.0", Tag: "cp311-cp311-macosx_11_0_arm64"}.Write(t, dir)
	pypitest.Wheel{Name: "conflicta", Version: "1.0", Requires: []string{"conflictb==2.0"}}.Write(t, dir)
	pypitest.Wheel{Name: "conflictb", Version: "1.0"}.Write(t, dir)
	pypitest.Wheel{Name: "conflictb", Version: "2.0"}.Write(t, dir)
	pypitest.Wheel{Name: "needsghost", Version: "1.0", Requires: []string{"ghost>=1"}}.Write(t, dir)
	pypitest.Sdist(t, dir, "sdistonly", "2.0")
	ix := pypitest.Start(t, dir)
	m := testManager(t, ix.URL)
	for _, tc := range []struct {
		req   string
		kind  error
		parts []string
	}{
		{"nosuchpkg==1.0", ErrUnknownPackage, []string{"nosuchpkg", `no project "nosuchpkg"`, ix.URL}},
		{"pyaes==1.6.1", ErrSdistOnly, []string{"pyaes 1.6.1", "only source distributions on the index", "(pyaes-1.6.1.tar.gz)", "wheels only"}},
		{"sdistonly", ErrSdistOnly, []string{"sdistonly-2.0.tar.gz"}},
		{"wrongpy==1.0", ErrNoWheel, []string{"wrongpy 1.0", "CPython 3.11", "wrongpy-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "macosx"}},
		{"texttable==0.9", ErrNoVersion, []string{"texttable has no release 0.9", "1.7.2"}},
		{"texttable<1", ErrNoVersion, []string{"no release of texttable that matches", "1.7.2"}},
		{"conflicta==1.0\nconflictb==1.0", ErrConflict, []string{"conflicta==1.0 and conflictb==1.0", "The user requested conflictb==1.0", "conflicta 1.0 depends on conflictb==2.0"}},
		{"needsghost", ErrUnknownPackage, []string{"ghost>=1 (required by needsghost", `no project "ghost"`}},
	} {
		_, err := resolve(t, m, tc.req+"\n")
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", tc.req, err)
			continue
		}
		wantKind(t, err, tc.kind, tc.parts...)
	}
	if ents, _ := os.ReadDir(m.Wheels.Dir()); len(ents) != 0 {
		t.Errorf("failed resolutions cached %d entries", len(ents))
	}
}

// Offline: no index, a directory of wheels; the diagnosis reads it too.
func TestResolveFindLinksOnly(t *testing.T) {
	dir := t.TempDir()
	pypitest.Copy(t, dir, "texttable-1.7.2", "pyaes-1.6.1")
	m := testManager(t, NoIndex, dir)
	lock, err := resolve(t, m, "texttable\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(lock.Pins) != 1 || lock.Pins[0].Version != "1.7.2" {
		t.Fatalf("lock %v", lock.Lines())
	}
	_, err = resolve(t, m, "pyaes\n")
	wantKind(t, err, ErrSdistOnly, "pyaes-1.6.1.tar.gz", "find-links "+dir)
	_, err = resolve(t, m, "requests\n")
	wantKind(t, err, ErrUnknownPackage, "requests")
}

// An index that does not answer: refused connections and a server that
// accepts and never answers both fail in bounded time as unavailable.
func TestResolveIndexUnavailable(t *testing.T) {
	silent := tcptest.Serve(t, func(c net.Conn, _ int) {
		defer c.Close()
		_, _ = c.Read(make([]byte, 1)) // accept, read, never answer
		time.Sleep(time.Minute)
	})
	for _, tc := range []struct{ name, url string }{
		{"closed port", "http://" + tcptest.FreeAddr(t) + "/simple/"},
		{"never answers", "http://" + silent.String() + "/simple/"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := testManager(t, tc.url)
			t0 := time.Now()
			_, err := resolve(t, m, "requests==2.32.3\n")
			wantKind(t, err, ErrIndexUnavailable, tc.url, "did not answer")
			if errors.Is(err, ErrInvalid) {
				t.Error("an unavailable index is not the request's fault")
			}
			// pip: 2 attempts of at most 2 s, plus its start-up.
			if d := time.Since(t0); d > 30*time.Second {
				t.Errorf("took %s", d)
			}
		})
	}
}

// The host interpreter must be the guest's CPython 3.11 with pip: anything
// else is refused before pip runs, saying what it is.
func TestCheckPython(t *testing.T) {
	dir := t.TempDir()
	other := filepath.Join(dir, "python3.12")
	if err := os.WriteFile(other, []byte("#!/bin/sh\necho cpython 3 12 cb0d0d0a\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ python, want string }{
		{filepath.Join(dir, "missing"), "missing"},
		{other, "it must be CPython 3.11"},
	} {
		r := &Resolver{Python: tc.python}
		err := r.CheckPython(context.Background())
		if !errors.Is(err, ErrHostPython) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.python, err)
		}
		reqs, _ := ParseRequirements([]byte("texttable\n"))
		if _, err := r.Resolve(context.Background(), reqs); !errors.Is(err, ErrHostPython) {
			t.Errorf("%s: resolve: %v", tc.python, err)
		}
	}
}
