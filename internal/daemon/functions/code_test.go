package functions

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/codearchive/archivetest"
	"github.com/thaw-dev/thaw/internal/errdefs"
)

// tree lists the files and directories under root as "path" (dirs with a
// trailing slash) mapped to "mode content".
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	fsys := os.DirFS(root)
	err := fs.WalkDir(fsys, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[rel+"/"] = ""
		case d.Type().IsRegular():
			b, err := fs.ReadFile(fsys, rel)
			if err != nil {
				return err
			}
			out[rel] = info.Mode().Perm().String() + " " + string(b)
		default:
			out[rel] = info.Mode().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		g, gok := got[k]
		w, wok := want[k]
		switch {
		case !gok:
			t.Errorf("missing %s (want %q)", k, w)
		case !wok:
			t.Errorf("unexpected %s (%q)", k, g)
		case g != w:
			t.Errorf("%s = %q, want %q", k, g, w)
		}
	}
}

func TestExtractArchive(t *testing.T) {
	// The modes below are what the files get under an ordinary umask; a
	// daemon opened earlier in this process set 077 (its data is its own).
	defer syscall.Umask(syscall.Umask(0o022))
	archive := archivetest.TarGz(t,
		archivetest.Entry{Name: "./", Typeflag: tar.TypeDir, Mode: 0o755},
		archivetest.Entry{Name: "./handler.py", Body: "def handler(event):\n    return event\n"},
		archivetest.Entry{Name: "lib/", Typeflag: tar.TypeDir, Mode: 0o700},
		archivetest.Entry{Name: "lib/run.sh", Body: "#!/bin/sh\n", Mode: 0o755},
		archivetest.Entry{Name: "lib/secret.txt", Body: "s", Mode: 0o600},
		archivetest.Entry{Name: "lib/suid", Body: "x", Mode: 0o4755},
		archivetest.Entry{Name: "data/deep/er/file.json", Body: "{}"},
		archivetest.Entry{Name: "a/./b/../c.txt", Body: "c"},
		archivetest.Entry{Name: "..dotdot-prefix", Body: "a file name, not a parent"},
		archivetest.Entry{Name: "empty", Body: ""},
	)
	dst := filepath.Join(t.TempDir(), "hello")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := extractArchive(dst, bytes.NewReader(archive)); err != nil {
		t.Fatalf("extractArchive: %v", err)
	}
	sameTree(t, tree(t, dst), map[string]string{
		"handler.py":             "-rw-r--r-- def handler(event):\n    return event\n",
		"lib/":                   "",
		"lib/run.sh":             "-rwxr-xr-x #!/bin/sh\n",
		"lib/secret.txt":         "-rw-r--r-- s", // always world-readable: the guest reads it as another user
		"lib/suid":               "-rwxr-xr-x x", // no setuid
		"data/":                  "",
		"data/deep/":             "",
		"data/deep/er/":          "",
		"data/deep/er/file.json": "-rw-r--r-- {}",
		"a/":                     "",
		"a/c.txt":                "-rw-r--r-- c",
		"..dotdot-prefix":        "-rw-r--r-- a file name, not a parent",
		"empty":                  "-rw-r--r-- ",
	})
}

func TestExtractArchiveRejects(t *testing.T) {
	plainTar := func(t *testing.T) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		if err := tw.WriteHeader(&tar.Header{Name: "handler.py", Mode: 0o644, Size: 1}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte("x"))
		tw.Close()
		return buf.Bytes()
	}
	entries := func(es ...archivetest.Entry) func(t *testing.T) []byte {
		return func(t *testing.T) []byte { return archivetest.TarGz(t, es...) }
	}
	handler := archivetest.Entry{Name: "handler.py", Body: "def handler(e): return e\n"}
	tests := []struct {
		name    string
		archive func(t *testing.T) []byte
		wantMsg string
	}{
		{name: "parent directory", archive: entries(handler, archivetest.Entry{Name: "../x", Body: "escape"}), wantMsg: "leaves the function directory"},
		{name: "parent through a subdirectory", archive: entries(archivetest.Entry{Name: "lib/../../x", Body: "escape"}), wantMsg: "leaves the function directory"},
		{name: "dot-slash parent", archive: entries(archivetest.Entry{Name: "./../x", Body: "escape"}), wantMsg: "leaves the function directory"},
		{name: "parent directory entry", archive: entries(archivetest.Entry{Name: "../", Typeflag: tar.TypeDir, Mode: 0o755}), wantMsg: "leaves the function directory"},
		{name: "bare dot-dot", archive: entries(archivetest.Entry{Name: "..", Typeflag: tar.TypeDir, Mode: 0o755}), wantMsg: "leaves the function directory"},
		{name: "absolute path", archive: entries(archivetest.Entry{Name: "/abs", Body: "escape"}), wantMsg: "leaves the function directory"},
		{name: "absolute path into /etc", archive: entries(archivetest.Entry{Name: "/etc/cron.d/x", Body: "escape"}), wantMsg: "leaves the function directory"},
		{name: "symlink", archive: entries(handler, archivetest.Entry{Name: "passwd", Typeflag: tar.TypeSymlink, Link: "/etc/passwd"}), wantMsg: "not a regular file or directory"},
		{name: "relative symlink", archive: entries(archivetest.Entry{Name: "up", Typeflag: tar.TypeSymlink, Link: ".."}), wantMsg: "not a regular file or directory"},
		{name: "hard link", archive: entries(handler, archivetest.Entry{Name: "h2", Typeflag: tar.TypeLink, Link: "handler.py"}), wantMsg: "not a regular file or directory"},
		{name: "fifo", archive: entries(archivetest.Entry{Name: "pipe", Typeflag: tar.TypeFifo}), wantMsg: "not a regular file or directory"},
		{name: "character device", archive: entries(archivetest.Entry{Name: "null", Typeflag: tar.TypeChar}), wantMsg: "not a regular file or directory"},
		{name: "duplicate file", archive: entries(handler, handler), wantMsg: "handler.py"},
		{name: "declared size over the limit", archive: entries(handler, archivetest.Entry{Name: "big.bin", Size: MaxCodeBytes + 1}), wantMsg: "exceeds"},
		{name: "not gzip: plain tar", archive: plainTar, wantMsg: "not gzip"},
		{name: "not gzip: text", archive: func(*testing.T) []byte { return []byte("def handler(e): pass\n") }, wantMsg: "not gzip"},
		{name: "not gzip: empty body", archive: func(*testing.T) []byte { return nil }, wantMsg: "not gzip"},
		{name: "gzip of something that is not tar", archive: func(t *testing.T) []byte {
			var buf bytes.Buffer
			gz := gzip.NewWriter(&buf)
			gz.Write(bytes.Repeat([]byte("not a tar header "), 64))
			gz.Close()
			return buf.Bytes()
		}, wantMsg: "archive"},
		{name: "truncated", archive: func(t *testing.T) []byte {
			b := archivetest.TarGz(t, archivetest.Entry{Name: "handler.py", Body: strings.Repeat("# padding that compresses poorly 0123456789\n", 200)})
			return b[:len(b)/2]
		}, wantMsg: "archive"},
		// A client's archive that contradicts itself is a bad request like
		// the others, but these two currently fail with the raw mkdir
		// error, which the API turns into 500 internal.
		{name: "directory where a file was", archive: entries(handler, archivetest.Entry{Name: "lib", Body: "x"}, archivetest.Entry{Name: "lib/", Typeflag: tar.TypeDir, Mode: 0o755}), wantMsg: "lib"},
		{name: "file under a file", archive: entries(archivetest.Entry{Name: "lib", Body: "x"}, archivetest.Entry{Name: "lib/util.py", Body: "y"}), wantMsg: "lib"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkArchiveRefused(t, tt.archive(t), tt.wantMsg)
		})
	}
}

// checkArchiveRefused checks that extracting archive is refused as invalid,
// with an error that mentions wantMsg, and writes nothing outside the
// function's code directory.
func checkArchiveRefused(t *testing.T, archive []byte, wantMsg string) {
	t.Helper()
	root := t.TempDir()
	dst := filepath.Join(root, "fn", "code")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	err := extractArchive(dst, bytes.NewReader(archive))
	if !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("extractArchive = %v, want errdefs.ErrInvalid", err)
	}
	if !strings.Contains(err.Error(), wantMsg) {
		t.Errorf("error %q does not mention %q", err, wantMsg)
	}
	// Nothing was written outside the function directory.
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "fn" {
		t.Errorf("entries next to the function directory: %v", ents)
	}
	if got := tree(t, filepath.Join(root, "fn")); len(got) > 0 {
		for k := range got {
			if !strings.HasPrefix(k, "code/") {
				t.Errorf("written outside code/: %s", k)
			}
		}
	}
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // umask-proof
			t.Fatal(err)
		}
	}
}

func TestDigestTree(t *testing.T) {
	files := map[string]string{
		"handler.py":      "def handler(e): return e\n",
		"lib/util.py":     "X = 1\n",
		"lib/run.sh":      "#!/bin/sh\n",
		"data/table.json": `{"a": 1}`,
	}
	digest := func(t *testing.T, root string) (string, int64) {
		t.Helper()
		d, n, err := digestTree(root)
		if err != nil {
			t.Fatalf("digestTree: %v", err)
		}
		if len(d) != 64 {
			t.Fatalf("digest %q is not hex SHA-256", d)
		}
		return d, n
	}
	base := t.TempDir()
	writeTree(t, base, files)
	want, size := digest(t, base)
	var total int64
	for _, b := range files {
		total += int64(len(b))
	}
	if size != total {
		t.Errorf("size = %d, want %d", size, total)
	}

	tests := digestEdits(files)
	seen := map[string]string{want: "original"}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, files)
			tt.edit(t, root)
			got, _ := digest(t, root)
			if again, _ := digest(t, root); again != got {
				t.Fatalf("digestTree is not deterministic: %s then %s", got, again)
			}
			if changed := got != want; changed != tt.changes {
				t.Fatalf("digest changed = %v, want %v", changed, tt.changes)
			}
			if tt.changes {
				if other, dup := seen[got]; dup {
					t.Errorf("digest equals the one of %q", other)
				}
				seen[got] = tt.name
			}
		})
	}
}

// digestEdit is an edit of a function's code and whether it must change
// the code's digest.
type digestEdit struct {
	name    string
	edit    func(t *testing.T, root string)
	changes bool
}

// digestEdits are edits of the tree of files: those that leave the digest
// alone (times, non-executable modes, empty directories) and those that
// change it.
func digestEdits(files map[string]string) []digestEdit {
	return []digestEdit{
		{name: "identical copy", edit: func(*testing.T, string) {}, changes: false},
		{name: "modification times differ", changes: false, edit: func(t *testing.T, root string) {
			old := time.Unix(1e9, 0)
			for name := range files {
				if err := os.Chtimes(filepath.Join(root, name), old, old); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{name: "non-executable permission bits differ", changes: false, edit: func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "handler.py"), 0o600)
		}},
		{name: "empty directory added", changes: false, edit: func(t *testing.T, root string) {
			if err := os.Mkdir(filepath.Join(root, "empty"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "content changed, same size", changes: true, edit: func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "lib/util.py"), "X = 2\n")
		}},
		{name: "content grew", changes: true, edit: func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "handler.py"), "def handler(e): return e\n\n")
		}},
		{name: "file renamed", changes: true, edit: func(t *testing.T, root string) {
			if err := os.Rename(filepath.Join(root, "lib/util.py"), filepath.Join(root, "lib/utils.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "file moved to another directory", changes: true, edit: func(t *testing.T, root string) {
			if err := os.Rename(filepath.Join(root, "lib/util.py"), filepath.Join(root, "data/util.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "executable bit set", changes: true, edit: func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "handler.py"), 0o744)
		}},
		{name: "executable bit cleared", changes: true, edit: func(t *testing.T, root string) {
			chmod(t, filepath.Join(root, "lib/run.sh"), 0o644)
		}},
		{name: "empty file added", changes: true, edit: func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "__init__.py"), "")
		}},
		{name: "file removed", changes: true, edit: func(t *testing.T, root string) {
			if err := os.Remove(filepath.Join(root, "data/table.json")); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "bytes moved from one file to the next", changes: true, edit: func(t *testing.T, root string) {
			// "data/table.json" precedes "handler.py": move its last byte over.
			writeFile(t, filepath.Join(root, "data/table.json"), `{"a": 1`)
			writeFile(t, filepath.Join(root, "handler.py"), "}def handler(e): return e\n")
		}},
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
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
