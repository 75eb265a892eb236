package functions

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/dirtest"
	"github.com/thaw-dev/thaw/internal/errdefs"
)

// copyTree copies src as an in-process (trusted) caller with src's parent
// as the function root.
func copyTree(dst, src string) error {
	m := &Manager{cfg: Config{FunctionRoots: []string{filepath.Dir(filepath.Clean(src))}},
		d: Deps{CallerFrom: func(context.Context) (Caller, bool) { return Caller{}, false }}}
	return m.copySource(context.Background(), dst, src)
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
	s, _ := newManager(t, func(c *Config) { c.FunctionRoots = []string{root} })
	copyHook = func(rel string) {
		if rel == "z-secret" {
			os.Remove(filepath.Join(src, "z-secret"))
			mustSymlink(t, secret, filepath.Join(src, "z-secret"))
		}
	}
	t.Cleanup(func() { copyHook = nil })
	ctx := withCaller(context.Background(), Caller{Unix: true, UID: 0})
	_, err := s.CreateFunction(ctx, Spec{Name: "swap", Directory: src})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "z-secret is a symbolic link") {
		t.Fatalf("create = %v, want the swapped file refused", err)
	}
	if left := dirtest.Names(t, s.FunctionsDir()); len(left) != 0 {
		t.Errorf("kept %v", left)
	}
	if _, err := s.d.Catalog.GetFunction(ctx, "swap"); !errors.Is(err, errdefs.ErrNotFound) {
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
		{name: "over TCP, even with the token", roots: []string{root}, caller: &Caller{}, dir: src, wantErr: errdefs.ErrForbidden, wantMsg: "Unix socket"},
		{name: "another local user", roots: []string{root}, caller: &Caller{Unix: true, UID: 65534, GID: 65534}, dir: src, wantErr: errdefs.ErrForbidden, wantMsg: "uid 65534"},
		{name: "no function roots configured", caller: &Caller{Unix: true}, dir: src, wantErr: errdefs.ErrForbidden, wantMsg: "--function-roots"},
		{name: "outside the roots", roots: []string{root}, caller: &Caller{Unix: true}, dir: outside, wantErr: errdefs.ErrForbidden, wantMsg: "not under a function root"},
		{name: "dot-dot out of the root", roots: []string{root}, caller: &Caller{Unix: true}, dir: root + "/fn/../../" + filepath.Base(outside), wantErr: errdefs.ErrForbidden, wantMsg: "not under"},
		{name: "a root's sibling with the same prefix", roots: []string{root}, caller: &Caller{Unix: true}, dir: root + "-evil", wantErr: errdefs.ErrForbidden, wantMsg: "not under"},
		{name: "relative path", roots: []string{root}, caller: &Caller{Unix: true}, dir: "fn", wantErr: errdefs.ErrInvalid, wantMsg: "absolute"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.group == "" && strings.Contains(tt.name, "trusted group") {
				t.Skip("no group with gid 65534 on this host")
			}
			s, _ := newManager(t, func(c *Config) { c.FunctionRoots, c.TrustedGroup = tt.roots, tt.group })
			ctx := context.Background()
			if tt.caller != nil {
				ctx = withCaller(ctx, *tt.caller)
			}
			_, err := s.CreateFunction(ctx, Spec{Name: fmt.Sprintf("fn%d", i), Directory: tt.dir})
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("create = %v, want %v mentioning %q", err, tt.wantErr, tt.wantMsg)
			}
			if left := dirtest.Names(t, s.FunctionsDir()); len(left) != 0 {
				t.Errorf("kept %v", left)
			}
		})
	}
}

// A function of many small files gets a disk with inodes for all of them.
func TestManySmallFilesFitTheDisk(t *testing.T) {
	var ents []archivetest.Entry
	ents = append(ents, archivetest.Entry{Name: "handler.py", Body: "def handle(e): return 1\n"})
	for i := range 5000 {
		ents = append(ents, archivetest.Entry{Name: fmt.Sprintf("data/d%02d/f%04d.txt", i%50, i), Body: "x"})
	}
	s, _ := newManager(t, nil)
	f, err := s.CreateFunction(context.Background(), Spec{Name: "many", Archive: bytes.NewReader(archivetest.TarGz(t, ents...))})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := os.Stat(f.Disk); err != nil {
		t.Fatal(err)
	}
}

func TestArchiveEntryLimit(t *testing.T) {
	ents := []archivetest.Entry{{Name: "handler.py", Body: "x"}}
	for i := range MaxCodeEntries {
		ents = append(ents, archivetest.Entry{Name: fmt.Sprintf("f%05d", i), Body: ""})
	}
	s, _ := newManager(t, nil)
	_, err := s.CreateFunction(context.Background(), Spec{Name: "flood", Archive: bytes.NewReader(archivetest.TarGz(t, ents...))})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "more than 10000") {
		t.Fatalf("create = %v, want the entry limit", err)
	}
	if left := dirtest.Names(t, s.FunctionsDir()); len(left) != 0 {
		t.Errorf("kept %v", left)
	}
	deep := strings.Repeat("d/", MaxCodeDepth) + "f"
	_, err = s.CreateFunction(context.Background(), Spec{Name: "deep",
		Archive: bytes.NewReader(archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: "x"}, archivetest.Entry{Name: deep, Body: "x"}))})
	if !errors.Is(err, errdefs.ErrInvalid) || !strings.Contains(err.Error(), "nested deeper") {
		t.Fatalf("deep archive = %v", err)
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
	s, _ := newManager(t, func(c *Config) { c.FunctionRoots, c.TrustedGroup = []string{root}, g.Name })
	member := withCaller(context.Background(), Caller{Unix: true, UID: 65534, GID: 65534})
	_, err = s.CreateFunction(member, Spec{Name: "peek", Directory: src})
	if !errors.Is(err, errdefs.ErrForbidden) || !strings.Contains(err.Error(), "z-secret is not readable by uid 65534") {
		t.Fatalf("create = %v", err)
	}
	os.Chmod(filepath.Join(src, "z-secret"), 0o640)
	os.Chown(filepath.Join(src, "z-secret"), 0, 65534) // readable through the group
	if _, err := s.CreateFunction(member, Spec{Name: "peek", Directory: src}); err != nil {
		t.Fatalf("create of readable files: %v", err)
	}
	os.Chmod(filepath.Join(src, "lib"), 0o700)
	if _, err := s.CreateFunction(member, Spec{Name: "peek2", Directory: src}); !errors.Is(err, errdefs.ErrForbidden) {
		t.Fatalf("an unsearchable directory: %v", err)
	}
}

func TestCopyTree(t *testing.T) {
	// The modes below are what the files get under an ordinary umask; a
	// daemon opened earlier in this process set 077 (its data is its own).
	defer syscall.Umask(syscall.Umask(0o022))
	src := t.TempDir()
	writeTree(t, src, map[string]string{
		"handler.py":                   "def handler(e): return e\n",
		"lib/util.py":                  "X = 1\n",
		"lib/run.sh":                   "#!/bin/sh\n",
		"lib/empty/":                   "",
		"__pycache__/handler.pyc":      "bytecode",
		"lib/__pycache__/util.pyc":     "bytecode",
		".git/HEAD":                    "ref: refs/heads/main\n",
		"docs/.gitignore":              "*.pyc\n",
		"docs/__pycache__extra/ok.txt": "kept: only the exact name is skipped",
	})
	if err := os.Chmod(filepath.Join(src, "lib/util.py"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A symlink under a skipped directory is never looked at.
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "__pycache__", "link")); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "code")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyTree(dst, src); err != nil {
		t.Fatalf("copyTree: %v", err)
	}
	sameTree(t, tree(t, dst), map[string]string{
		"handler.py":                   "-rw-r--r-- def handler(e): return e\n",
		"lib/":                         "",
		"lib/util.py":                  "-rw-r--r-- X = 1\n",
		"lib/run.sh":                   "-rwxr-xr-x #!/bin/sh\n",
		"lib/empty/":                   "",
		"docs/":                        "",
		"docs/.gitignore":              "-rw-r--r-- *.pyc\n",
		"docs/__pycache__extra/":       "",
		"docs/__pycache__extra/ok.txt": "-rw-r--r-- kept: only the exact name is skipped",
	})
}

func TestCopyTreeRefuses(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, src string) string // returns the directory to copy
		wantMsg string
	}{
		{name: "symlink to a file", wantMsg: "link", setup: func(t *testing.T, src string) string {
			mustSymlink(t, "/etc/passwd", filepath.Join(src, "link"))
			return src
		}},
		{name: "relative symlink to a sibling", wantMsg: "lib/alias.py", setup: func(t *testing.T, src string) string {
			mustSymlink(t, "../handler.py", filepath.Join(src, "lib", "alias.py"))
			return src
		}},
		{name: "symlink to a directory", wantMsg: "root", setup: func(t *testing.T, src string) string {
			mustSymlink(t, "/", filepath.Join(src, "root"))
			return src
		}},
		{name: "dangling symlink", wantMsg: "gone", setup: func(t *testing.T, src string) string {
			mustSymlink(t, filepath.Join(src, "nowhere"), filepath.Join(src, "gone"))
			return src
		}},
		{name: "fifo", wantMsg: "pipe", setup: func(t *testing.T, src string) string {
			if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
			return src
		}},
		{name: "missing directory", wantMsg: "does not exist", setup: func(t *testing.T, src string) string {
			return filepath.Join(src, "nope")
		}},
		{name: "a file, not a directory", wantMsg: "not a directory", setup: func(t *testing.T, src string) string {
			return filepath.Join(src, "handler.py")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := t.TempDir()
			writeTree(t, src, map[string]string{"handler.py": "h", "lib/util.py": "u"})
			from := tt.setup(t, src)
			dst := filepath.Join(t.TempDir(), "code")
			if err := os.Mkdir(dst, 0o755); err != nil {
				t.Fatal(err)
			}
			err := copyTree(dst, from)
			if !errors.Is(err, errdefs.ErrInvalid) {
				t.Fatalf("copyTree = %v, want errdefs.ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
		})
	}
}

func TestCopyTreeOfSymlinkedDirectory(t *testing.T) {
	// copyTree's os.Stat follows a symlinked source directory and accepts
	// it, but filepath.WalkDir does not descend into a symlink root: the
	// copy "succeeds" with nothing in it, and the user is then told the
	// function has no handler.py. It should copy the target's files (or
	// refuse the symlink like any other).
	real := t.TempDir()
	writeTree(t, real, map[string]string{"handler.py": "h"})
	link := filepath.Join(t.TempDir(), "fn")
	mustSymlink(t, real, link)
	dst := filepath.Join(t.TempDir(), "code")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	err := copyTree(dst, link)
	if err != nil {
		if !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("copyTree(symlinked dir) = %v, want success or errdefs.ErrInvalid", err)
		}
		return
	}
	if got := tree(t, dst); got["handler.py"] == "" {
		t.Fatalf("copyTree(symlinked dir) succeeded but copied %v, want handler.py", got)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}
