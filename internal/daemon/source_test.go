package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/thaw-dev/thaw/internal/catalog"
)

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
	cfg.Deps.setDefaults()
	s := &Service{cfg: cfg, log: slog.New(slog.NewTextHandler(io.Discard, nil)), db: db, creating: map[string]int{}, vers: newVersionState()}
	if err := s.openDeps(); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.functionsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(s.snapshotsDir(), 0o700); err != nil {
		t.Fatal(err)
	}
	return s
}

// openModes makes a tree readable by everyone: a daemon opened by another
// test in this process set the umask to 077.
func openModes(t *testing.T, root string) {
	t.Helper()
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil {
			mode := os.FileMode(0o644)
			if d.IsDir() {
				mode = 0o755
			}
			os.Chmod(p, mode)
		}
		return nil
	})
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

// The attack found on the old code: during the copy, z-secret is swapped
// for a symlink to a root-only file. The copy refuses it and keeps nothing.
func TestCreateFromDirectoryRefusesASwapDuringTheCopy(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "fn")
	writeTree(t, src, map[string]string{"handler.py": "def handle(e): return open('z-secret').read()\n",
		"big.bin": strings.Repeat("x", 1<<20), "z-secret": "harmless"})
	secret := filepath.Join(t.TempDir(), "shadow")
	writeFile(t, secret, "root's secret")
	chmod(t, secret, 0o600)
	s := fnService(t, func(c *Config) { c.FunctionRoots = []string{root} })
	copyHook = func(rel string) {
		if rel == "z-secret" {
			os.Remove(filepath.Join(src, "z-secret"))
			mustSymlink(t, secret, filepath.Join(src, "z-secret"))
		}
	}
	t.Cleanup(func() { copyHook = nil })
	ctx := WithCaller(context.Background(), Caller{Unix: true, UID: 0})
	_, err := s.CreateFunction(ctx, FunctionSpec{Name: "swap", Directory: src})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "z-secret is a symbolic link") {
		t.Fatalf("create = %v, want the swapped file refused", err)
	}
	if left := entries(t, s.functionsDir()); len(left) != 0 {
		t.Errorf("kept %v", left)
	}
	if _, err := s.db.GetFunction(ctx, "swap"); !errors.Is(err, ErrNotFound) {
		t.Errorf("function recorded: %v", err)
	}
}

func TestCreateFromDirectoryWhoAndWhere(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "fn")
	writeTree(t, src, map[string]string{"handler.py": "def handle(e): return 1\n"})
	openModes(t, root)
	outside := t.TempDir()
	writeTree(t, outside, map[string]string{"handler.py": "x"})
	nogroup := ""
	if g, err := user.LookupGroupId("65534"); err == nil {
		nogroup = g.Name
	}
	tests := []struct {
		name    string
		roots   []string
		group   string
		caller  *Caller
		dir     string
		wantErr error
		wantMsg string
	}{
		{name: "root over the socket", roots: []string{root}, caller: &Caller{Unix: true}, dir: src},
		{name: "in-process", roots: []string{root}, dir: src},
		{name: "a member of the trusted group", roots: []string{root}, group: nogroup, caller: &Caller{Unix: true, UID: 65534, GID: 65534}, dir: src},
		{name: "over TCP, even with the token", roots: []string{root}, caller: &Caller{}, dir: src, wantErr: ErrForbidden, wantMsg: "Unix socket"},
		{name: "another local user", roots: []string{root}, caller: &Caller{Unix: true, UID: 65534, GID: 65534}, dir: src, wantErr: ErrForbidden, wantMsg: "uid 65534"},
		{name: "no function roots configured", caller: &Caller{Unix: true}, dir: src, wantErr: ErrForbidden, wantMsg: "--function-roots"},
		{name: "outside the roots", roots: []string{root}, caller: &Caller{Unix: true}, dir: outside, wantErr: ErrForbidden, wantMsg: "not under a function root"},
		{name: "dot-dot out of the root", roots: []string{root}, caller: &Caller{Unix: true}, dir: root + "/fn/../../" + filepath.Base(outside), wantErr: ErrForbidden, wantMsg: "not under"},
		{name: "a root's sibling with the same prefix", roots: []string{root}, caller: &Caller{Unix: true}, dir: root + "-evil", wantErr: ErrForbidden, wantMsg: "not under"},
		{name: "relative path", roots: []string{root}, caller: &Caller{Unix: true}, dir: "fn", wantErr: ErrInvalid, wantMsg: "absolute"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.group == "" && strings.Contains(tt.name, "trusted group") {
				t.Skip("no group with gid 65534 on this host")
			}
			s := fnService(t, func(c *Config) { c.FunctionRoots, c.TrustedGroup = tt.roots, tt.group })
			ctx := context.Background()
			if tt.caller != nil {
				ctx = WithCaller(ctx, *tt.caller)
			}
			_, err := s.CreateFunction(ctx, FunctionSpec{Name: fmt.Sprintf("fn%d", i), Directory: tt.dir})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("create = %v, want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
			}
			if left := entries(t, s.functionsDir()); len(left) != 0 {
				t.Errorf("kept %v", left)
			}
		})
	}
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

// A function of many small files gets a disk with inodes for all of them.
func TestManySmallFilesFitTheDisk(t *testing.T) {
	var ents []tarEntry
	ents = append(ents, tarEntry{name: "handler.py", body: "def handle(e): return 1\n"})
	for i := range 5000 {
		ents = append(ents, tarEntry{name: fmt.Sprintf("data/d%02d/f%04d.txt", i%50, i), body: "x"})
	}
	s := fnService(t, nil)
	f, err := s.CreateFunction(context.Background(), FunctionSpec{Name: "many", Archive: bytes.NewReader(tarGz(t, ents...))})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := os.Stat(f.Disk); err != nil {
		t.Fatal(err)
	}
}

func TestArchiveEntryLimit(t *testing.T) {
	ents := []tarEntry{{name: "handler.py", body: "x"}}
	for i := range MaxCodeEntries {
		ents = append(ents, tarEntry{name: fmt.Sprintf("f%05d", i), body: ""})
	}
	s := fnService(t, nil)
	_, err := s.CreateFunction(context.Background(), FunctionSpec{Name: "flood", Archive: bytes.NewReader(tarGz(t, ents...))})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "more than 10000") {
		t.Fatalf("create = %v, want the entry limit", err)
	}
	if left := entries(t, s.functionsDir()); len(left) != 0 {
		t.Errorf("kept %v", left)
	}
	deep := strings.Repeat("d/", MaxCodeDepth) + "f"
	_, err = s.CreateFunction(context.Background(), FunctionSpec{Name: "deep",
		Archive: bytes.NewReader(tarGz(t, tarEntry{name: "handler.py", body: "x"}, tarEntry{name: deep, body: "x"}))})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep archive = %v", err)
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

func TestDefaultMaxVMs(t *testing.T) {
	if n := defaultMaxVMs(640); n < 1 {
		t.Fatalf("defaultMaxVMs = %d", n)
	}
	if a, b := defaultMaxVMs(256), defaultMaxVMs(1<<20); a < b || b != 1 {
		t.Fatalf("more memory per VM gave more VMs: %d, %d", a, b)
	}
}

// A trusted group member cannot have the daemon (root) read a file under a
// function root that the member could not read.
func TestCreateFromDirectoryReadsOnlyWhatTheCallerMay(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("files of other owners need root")
	}
	g, err := user.LookupGroupId("65534")
	if err != nil {
		t.Skip("no group 65534 on this host")
	}
	root := t.TempDir()
	os.Chmod(root, 0o755)
	src := filepath.Join(root, "fn")
	writeTree(t, src, map[string]string{"handler.py": "x", "lib/a.py": "a", "z-secret": "root's"})
	for _, p := range []string{src, filepath.Join(src, "lib")} {
		os.Chmod(p, 0o755)
	}
	for _, p := range []string{"handler.py", "lib/a.py"} {
		os.Chmod(filepath.Join(src, p), 0o644)
	}
	chmod(t, filepath.Join(src, "z-secret"), 0o600)
	s := fnService(t, func(c *Config) { c.FunctionRoots, c.TrustedGroup = []string{root}, g.Name })
	member := WithCaller(context.Background(), Caller{Unix: true, UID: 65534, GID: 65534})
	_, err = s.CreateFunction(member, FunctionSpec{Name: "peek", Directory: src})
	if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "z-secret is not readable by uid 65534") {
		t.Fatalf("create = %v", err)
	}
	os.Chmod(filepath.Join(src, "z-secret"), 0o640)
	os.Chown(filepath.Join(src, "z-secret"), 0, 65534) // readable through the group
	if _, err := s.CreateFunction(member, FunctionSpec{Name: "peek", Directory: src}); err != nil {
		t.Fatalf("create of readable files: %v", err)
	}
	os.Chmod(filepath.Join(src, "lib"), 0o700)
	if _, err := s.CreateFunction(member, FunctionSpec{Name: "peek2", Directory: src}); !errors.Is(err, ErrForbidden) {
		t.Fatalf("an unsearchable directory: %v", err)
	}
}
