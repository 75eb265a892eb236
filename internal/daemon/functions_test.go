package daemon

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/catalog"
)

// Helpers the daemon's tests share to give functions their code (the
// component's own tests are in package functions).

// tarEntry is one member of a test archive. size, when set, is written in
// the header instead of len(body) and the body is left out: the archive
// then ends right after that header (enough for checks made on headers).
type tarEntry struct {
	name     string
	typeflag byte
	body     string
	mode     int64
	link     string
	size     int64
}

func tarGz(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	complete := true
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typeflag, Mode: e.mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if e.size != 0 {
			h.Size = e.size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if e.size != 0 {
			complete = false
			break
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if complete {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	st, err := os.Stat(path)
	mode := os.FileMode(0o644)
	if err == nil {
		mode = st.Mode().Perm()
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// fnService is a service with a catalog and a functions directory: enough
// to create functions (mkfs.ext4 runs for real).
func fnService(t *testing.T, edit func(*Config)) *Service {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, DefaultMemoryMiB: 256, DefaultVCPUs: 1}
	if edit != nil {
		edit(&cfg)
	}
	db, err := catalog.Open(filepath.Join(dir, "catalog.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	cfg.Deps.SetDefaults()
	s := &Service{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), db: db}
	s.lifecycle = s.newLifecycle()
	s.vms = s.newVMs()
	if err := s.openFunctions(); err != nil {
		t.Fatal(err)
	}
	s.versions = s.newVersions(nil)
	if err := os.MkdirAll(s.functionsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.snapshotsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return s
}

func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// The attack found on the old code: concurrent creates of one name left the
// catalog pointing at a directory another create had removed.
func TestConcurrentCreatesOfOneName(t *testing.T) {
	s := fnService(t, nil)
	archive := tarGz(t, tarEntry{name: "handler.py", body: "def handle(e): return 1\n"})
	const n = 6
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = s.CreateFunction(context.Background(), FunctionSpec{Name: "same", Archive: bytes.NewReader(archive)})
		}()
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, ErrExists):
			t.Errorf("create: %v, want success or ErrExists", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d creates succeeded, want 1: %v", ok, errs)
	}
	f, err := s.db.GetFunction(context.Background(), "same")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{f.Disk, filepath.Join(f.CodeDir, "same", "handler.py")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the recorded function lost %s: %v", p, err)
		}
	}
	if left := entries(t, s.functionsDir()); len(left) != 1 {
		t.Errorf("functions dir holds %v, want the one function", left)
	}
}

// Start-up removes what a crash left: half-built functions and snapshots,
// and directories the catalog does not know; recorded ones stay.
func TestRemoveLeftovers(t *testing.T) {
	s := fnService(t, nil)
	ctx := context.Background()
	f, err := s.CreateFunction(ctx, FunctionSpec{Name: "kept", Archive: bytes.NewReader(tarGz(t, tarEntry{name: "handler.py", body: "x"}))})
	if err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(s.snapshotsDir(), "snap-000000000001")
	if err := os.MkdirAll(snap, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := s.db.PutSnapshot(ctx, &catalog.Snapshot{ID: "snap-000000000001", Function: "kept", Dir: snap}); err != nil {
		t.Fatal(err)
	}
	junk := []string{filepath.Join(s.functionsDir(), ".tmp-kept-123"), filepath.Join(s.functionsDir(), "gone-0123456789ab"),
		filepath.Join(s.snapshotsDir(), ".tmp-snap-000000000002"), filepath.Join(s.snapshotsDir(), "snap-000000000003")}
	for _, j := range junk {
		if err := os.MkdirAll(j, 0o700); err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(j, "memory"), "x")
	}
	if err := s.removeLeftovers(ctx); err != nil {
		t.Fatal(err)
	}
	for _, j := range junk {
		if _, err := os.Stat(j); !os.IsNotExist(err) {
			t.Errorf("%s survived: %v", j, err)
		}
	}
	for _, k := range []string{f.Disk, snap} {
		if _, err := os.Stat(k); err != nil {
			t.Errorf("recorded %s removed: %v", k, err)
		}
	}
}

// A second daemon on a data directory is refused and names the holder.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	first, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = lockDataDir(dir)
	if !errors.Is(err, errDataDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
		t.Fatalf("second lock = %v", err)
	}
	first.Close()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	again.Close()
}
