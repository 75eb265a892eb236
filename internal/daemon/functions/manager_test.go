package functions

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
	"github.com/thaw-dev/thaw/internal/catalog/catalogtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
	"github.com/thaw-dev/thaw/internal/registry"
)

// fakeDaemon is the rest of the daemon as the component sees it: a real
// catalog in a temporary directory, and fakes of everything else that
// record what the component asked of them.
type fakeDaemon struct {
	db *catalog.DB

	mu        sync.Mutex
	reserved  map[string]bool
	created   []string // functions the adaptive restore was told of
	createErr error    // what Created returns
	phases    []string
	changed   []string // secrets SecretChanged was called with
	remote    string   // a directory PullFile copies remote files from
}

type callerKey struct{}

func withCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

var testName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)

func (f *fakeDaemon) deps() Deps {
	return Deps{Catalog: f.db, Log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		ValidName: func(name string) error {
			if !testName.MatchString(name) {
				return fmt.Errorf("%w: function name %q", errdefs.ErrInvalid, name)
			}
			return nil
		},
		CheckRestoreSettings: func(strategy, refresh string) error {
			if strategy != "" && strategy != "auto" {
				return fmt.Errorf("%w: strategy %q", errdefs.ErrInvalid, strategy)
			}
			return nil
		},
		Reserve: f.reserve,
		Created: func(_ context.Context, fn *catalog.Function, _, _ string) error {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.created = append(f.created, fn.Name)
			return f.createErr
		},
		CallerFrom: func(ctx context.Context) (Caller, bool) {
			c, ok := ctx.Value(callerKey{}).(Caller)
			return c, ok
		},
		Phase: func(_ context.Context, name string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.phases = append(f.phases, name)
		},
		SecretChanged: func(name string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.changed = append(f.changed, name)
		},
		PullFile: func(_ context.Context, _ *registry.RemoteManifest, path, dst string) error {
			b, err := os.ReadFile(filepath.Join(f.remote, path))
			if err != nil {
				return err
			}
			return os.WriteFile(dst, b, 0o600)
		},
	}
}

// reserve is the daemon's name reservation: one create of a name at a
// time, none of a recorded one.
func (f *fakeDaemon) reserve(ctx context.Context, name string) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.reserved[name] {
		return nil, fmt.Errorf("function %q is being created: %w", name, errdefs.ErrExists)
	}
	if _, err := f.db.GetFunction(ctx, name); err == nil {
		return nil, fmt.Errorf("function %q: %w", name, errdefs.ErrExists)
	}
	f.reserved[name] = true
	return func() { f.mu.Lock(); delete(f.reserved, name); f.mu.Unlock() }, nil
}

// newManager is the component over a fresh data directory (mkfs.ext4 runs
// for real); edit changes its configuration first.
func newManager(t *testing.T, edit func(*Config)) (*Manager, *fakeDaemon) {
	t.Helper()
	dir := t.TempDir()
	cfg := Config{DataDir: dir, DefaultMemoryMiB: 256, DefaultVCPUs: 1}
	if edit != nil {
		edit(&cfg)
	}
	cfg.Deps.SetDefaults()
	db := catalogtest.Open(t, dir)
	f := &fakeDaemon{db: db, reserved: map[string]bool{}, remote: t.TempDir()}
	m, err := New(cfg, f.deps())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(m.FunctionsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return m, f
}
