package daemon

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/catalog/catalogtest"
	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
)

// Helpers the daemon's tests share to give functions their code (the
// component's own tests are in package functions).

// fnService is a service with a catalog and a functions directory: enough
// to create functions (mkfs.ext4 runs for real).
func fnService(t *testing.T, edit func(*Config)) *Service {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, DefaultMemoryMiB: 256, DefaultVCPUs: 1}
	if edit != nil {
		edit(&cfg)
	}
	db := catalogtest.Open(t, dir)
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

// The attack found on the old code: concurrent creates of one name left the
// catalog pointing at a directory another create had removed.
func TestConcurrentCreatesOfOneName(t *testing.T) {
	s := fnService(t, nil)
	archive := archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return 1\n"})
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
	if left, err := os.ReadDir(s.functionsDir()); err != nil || len(left) != 1 {
		t.Errorf("functions dir holds %v (%v), want the one function", left, err)
	}
}

// Start-up removes what a crash left: half-built functions and snapshots,
// and directories the catalog does not know; recorded ones stay.
func TestRemoveLeftovers(t *testing.T) {
	s := fnService(t, nil)
	ctx := context.Background()
	f, err := s.CreateFunction(ctx, FunctionSpec{Name: "kept", Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "x"}))})
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
		if err := os.WriteFile(filepath.Join(j, "memory"), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
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
