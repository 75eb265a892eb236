package deps

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/deps/pypitest"
)

func TestInstallWheel(t *testing.T) {
	dir, tree := t.TempDir(), t.TempDir()
	w := pypitest.Wheel{Name: "thaw_probe", Version: "1.0", Files: map[string]string{
		"thaw_probe/__init__.py":                   "X = 1\n",
		"thaw_probe.pth":                           "thaw_probe_extra\n",
		"thaw_probe-1.0.data/platlib/_native.py":   "N = 2\n",
		"thaw_probe-1.0.data/scripts/probe":        "#!python\nprint('hi')\n",
		"thaw_probe-1.0.data/headers/probe.h":      "int x;\n",
		"thaw_probe-1.0.data/data/share/probe.txt": "data\n",
	}}
	in := newInstaller(tree, DefaultLimits)
	if err := in.install(w.Write(t, dir)); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"site/thaw_probe/__init__.py":         "X = 1\n",
		"site/thaw_probe.pth":                 "thaw_probe_extra\n",
		"site/_native.py":                     "N = 2\n",
		"site/thaw_probe-1.0.dist-info/WHEEL": "",
		"bin/probe":                           "#!/usr/bin/python3\nprint('hi')\n",
		"include/thaw-probe/probe.h":          "int x;\n",
		"data/share/probe.txt":                "data\n",
	} {
		b, err := os.ReadFile(filepath.Join(tree, path))
		if err != nil {
			t.Errorf("%s: %v", path, err)
			continue
		}
		if want != "" && string(b) != want {
			t.Errorf("%s = %q, want %q", path, b, want)
		}
	}
	if st, err := os.Stat(filepath.Join(tree, "bin/probe")); err != nil || st.Mode().Perm() != 0o755 {
		t.Errorf("script mode: %v %v", st.Mode(), err)
	}
	// A second wheel may not overwrite a file of the first.
	other := pypitest.Wheel{Name: "other", Version: "2.0", Files: map[string]string{"thaw_probe/__init__.py": "evil\n"}}
	err := in.install(other.Write(t, dir))
	wantRefused(t, err, "other-2.0-py3-none-any.whl", "thaw_probe/__init__.py", "would overwrite site/thaw_probe/__init__.py, installed by thaw_probe-1.0")
}

func wantRefused(t *testing.T, err error, parts ...string) {
	t.Helper()
	if !errors.Is(err, ErrBadWheel) || !errors.Is(err, ErrInvalid) {
		t.Fatalf("install = %v, want ErrBadWheel", err)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not name %q", err, p)
		}
	}
}

// editInitRecord is a RECORD edit that rewrites the line of
// evil/__init__.py with f.
func editInitRecord(f func(line string) string) func([]string) []string {
	return func(lines []string) []string {
		for i, l := range lines {
			if strings.HasPrefix(l, "evil/__init__.py,") {
				lines[i] = f(l)
			}
		}
		return lines
	}
}

// Untrusted archives: every way out of the layer, and every inconsistency
// between the wheel and its RECORD, is refused naming the wheel and entry.
func TestInstallRefusesHostileWheels(t *testing.T) {
	base := func() pypitest.Wheel {
		return pypitest.Wheel{Name: "evil", Version: "1.0", Files: map[string]string{"evil/__init__.py": "X = 1\n"}}
	}
	edit := func(f func(*pypitest.Wheel)) pypitest.Wheel { w := base(); f(&w); return w }
	for _, tc := range []struct {
		name  string
		wheel pypitest.Wheel
		want  []string
	}{
		{"dot-dot entry", edit(func(w *pypitest.Wheel) { w.Files["../../etc/cron.d/evil"] = "x" }), []string{`"../../etc/cron.d/evil"`, "'..' leaves the layer"}},
		{"dot-dot inside", edit(func(w *pypitest.Wheel) { w.Files["evil/../../x.py"] = "x" }), []string{"'..' leaves the layer"}},
		{"absolute path", edit(func(w *pypitest.Wheel) { w.Files["/etc/passwd"] = "x" }), []string{`"/etc/passwd"`, "absolute path"}},
		{"not a clean path", edit(func(w *pypitest.Wheel) { w.Files["evil/./x.py"] = "x" }), []string{"not a clean path"}},
		{"empty component", edit(func(w *pypitest.Wheel) { w.Files["evil//x.py"] = "x" }), []string{"not a clean path"}},
		{"backslash", edit(func(w *pypitest.Wheel) { w.Files[`evil\..\x.py`] = "x" }), []string{"backslash"}},
		{"control character", edit(func(w *pypitest.Wheel) { w.Files["evil/x\n.py"] = "x" }), []string{"control character"}},
		{"symlink out", edit(func(w *pypitest.Wheel) { w.Symlinks = map[string]string{"evil/passwd": "/etc/passwd"} }), []string{`"evil/passwd"`, "symbolic link"}},
		{"symlink inside", edit(func(w *pypitest.Wheel) { w.Symlinks = map[string]string{"evil/alias.py": "__init__.py"} }), []string{"symbolic link"}},
		{"huge entry", edit(func(w *pypitest.Wheel) {
			w.Files["evil/big.bin"] = "small"
			w.DeclaredSize = map[string]uint64{"evil/big.bin": MaxEntryBytes + 1}
		}), []string{`"evil/big.bin"`, "more than 256 MiB"}},
		{"duplicate entry", edit(func(w *pypitest.Wheel) { w.Duplicate = "evil/__init__.py" }), []string{`"evil/__init__.py"`, "appears twice"}},
		{"file and directory", edit(func(w *pypitest.Wheel) { w.Files["evil/__init__.py/x"] = "x" }), []string{"lies under", "which is a file"}},
		{"RECORD hash mismatch", edit(func(w *pypitest.Wheel) {
			w.EditRecord = editInitRecord(func(_ string) string { return "evil/__init__.py,sha256=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,6" })
		}), []string{`"evil/__init__.py"`, "does not match its sha256 in RECORD"}},
		{"RECORD size mismatch", edit(func(w *pypitest.Wheel) {
			w.EditRecord = editInitRecord(func(l string) string { return strings.TrimSuffix(l, ",6") + ",7" })
		}), []string{"6 bytes, RECORD says 7"}},
		{"file missing from RECORD", edit(func(w *pypitest.Wheel) { w.Unrecorded = map[string]string{"evil/hidden.py": "x"} }), []string{`"evil/hidden.py"`, "missing from RECORD"}},
		{"RECORD names a file the wheel lacks", edit(func(w *pypitest.Wheel) {
			w.EditRecord = func(lines []string) []string { return append(lines, "evil/ghost.py,sha256=AAAA,1") }
		}), []string{`"evil/ghost.py"`, "listed in RECORD but not in the wheel"}},
		{"RECORD without hashes", edit(func(w *pypitest.Wheel) {
			w.EditRecord = editInitRecord(func(_ string) string { return "evil/__init__.py,," })
		}), []string{"missing from RECORD (or listed without a hash)"}},
		{"RECORD with md5", edit(func(w *pypitest.Wheel) {
			w.EditRecord = editInitRecord(func(_ string) string { return "evil/__init__.py,md5=abc,6" })
		}), []string{"is not sha256="}},
		{"unknown .data directory", edit(func(w *pypitest.Wheel) { w.Files["evil-1.0.data/purelib2/x.py"] = "x" }), []string{"unknown .data directory"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir, tree := t.TempDir(), t.TempDir()
			err := newInstaller(tree, DefaultLimits).install(tc.wheel.Write(t, dir))
			wantRefused(t, err, append([]string{"evil-1.0-py3-none-any.whl"}, tc.want...)...)
			if _, err := os.Stat(filepath.Join(filepath.Dir(tree), "etc")); err == nil {
				t.Fatal("something was written outside the tree")
			}
		})
	}
}

// Wheels whose name, metadata or WHEEL lie, and archives that are no zip.
func TestInstallRefusesInconsistentWheels(t *testing.T) {
	dir := t.TempDir()
	w := pypitest.Wheel{Name: "good", Version: "1.0"}
	p := w.Write(t, dir)
	renamed := filepath.Join(dir, "other-1.0-py3-none-any.whl")
	if err := os.Rename(p, renamed); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, newInstaller(t.TempDir(), DefaultLimits).install(renamed), "good-1.0.dist-info", "does not name the wheel's project")
	junk := filepath.Join(dir, "junk-1.0-py3-none-any.whl")
	if err := os.WriteFile(junk, []byte("not a zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantRefused(t, newInstaller(t.TempDir(), DefaultLimits).install(junk), "not a zip archive")
}

// Bounds on the whole: a wheel's total and the layer's total.
func TestInstallBounds(t *testing.T) {
	dir := t.TempDir()
	limits := Limits{Entries: 10, EntryBytes: 1000, WheelBytes: 2000, LayerBytes: 3000}
	many := pypitest.Wheel{Name: "many", Version: "1.0", Files: map[string]string{}}
	for i := range 12 {
		many.Files[filepath.Join("many", string(rune('a'+i))+".py")] = "x"
	}
	wantRefused(t, newInstaller(t.TempDir(), limits).install(many.Write(t, dir)), "more than 10")
	big := pypitest.Wheel{Name: "big", Version: "1.0", Files: map[string]string{"big/a.py": strings.Repeat("a", 900), "big/b.py": strings.Repeat("b", 900)}}
	wantRefused(t, newInstaller(t.TempDir(), limits).install(big.Write(t, dir)), "more than 2000 bytes uncompressed")
	in := newInstaller(t.TempDir(), limits)
	for _, n := range []string{"one", "two", "three"} {
		w := pypitest.Wheel{Name: n, Version: "1.0", Files: map[string]string{n + "/x.py": strings.Repeat("x", 700)}}
		err := in.install(w.Write(t, dir))
		if n == "three" {
			if !errors.Is(err, ErrBadWheel) || !strings.Contains(err.Error(), "the wheels together are more than") {
				t.Fatalf("layer bound: %v", err)
			}
		} else if err != nil {
			t.Fatalf("%s: %v", n, err)
		}
	}
}
