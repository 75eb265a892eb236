package pypitest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// Wheel describes a wheel to fabricate: a zip with the project's files,
// METADATA, WHEEL and RECORD (PEP 427), correct unless a field says how
// to break it.
type Wheel struct {
	Name    string // distribution name, as in the file name ("thaw_probe")
	Version string
	Tag     string            // "py3-none-any" when empty
	Files   map[string]string // path in the wheel -> content; default: <name>/__init__.py
	// Requires are Requires-Dist lines of METADATA.
	Requires []string

	// Hostile shapes.
	Symlinks     map[string]string       // entries stored as symbolic links: path -> target
	Unrecorded   map[string]string       // files left out of RECORD
	EditRecord   func([]string) []string // rewrites RECORD's lines before it is written
	DeclaredSize map[string]uint64       // entries whose header claims this uncompressed size
	Duplicate    string                  // an entry written twice
}

// FileName is the wheel's file name.
func (w Wheel) FileName() string {
	tag := w.Tag
	if tag == "" {
		tag = "py3-none-any"
	}
	return fmt.Sprintf("%s-%s-%s.whl", w.Name, w.Version, tag)
}

func (w Wheel) distInfo() string { return w.Name + "-" + w.Version + ".dist-info" }

// Write writes the wheel into dir and returns its path.
func (w Wheel) Write(t testing.TB, dir string) string {
	t.Helper()
	p := filepath.Join(dir, w.FileName())
	if err := w.write(p); err != nil {
		t.Fatalf("fabricate %s: %v", w.FileName(), err)
	}
	return p
}

func (w Wheel) write(p string) error {
	files, names, record := w.contents()
	f, err := os.Create(p)
	if err != nil {
		return err
	}
	defer f.Close()
	zw := zip.NewWriter(f)
	for _, n := range names {
		if err := w.add(zw, n, files[n]); err != nil {
			return err
		}
		if n == w.Duplicate {
			if err := w.add(zw, n, files[n]); err != nil {
				return err
			}
		}
	}
	for n, target := range w.Symlinks {
		h := &zip.FileHeader{Name: n, Method: zip.Store}
		h.SetMode(fs.ModeSymlink | 0o777)
		fw, err := zw.CreateHeader(h)
		if err != nil {
			return err
		}
		if _, err := fw.Write([]byte(target)); err != nil {
			return err
		}
	}
	for n, body := range w.Unrecorded {
		if err := w.add(zw, n, body); err != nil {
			return err
		}
	}
	if err := w.add(zw, w.distInfo()+"/RECORD", strings.Join(record, "\n")+"\n"); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// contents are the wheel's files (with METADATA and WHEEL), their names
// sorted, and RECORD's lines (edited if EditRecord says so).
func (w Wheel) contents() (map[string]string, []string, []string) {
	files := map[string]string{}
	for k, v := range w.Files {
		files[k] = v
	}
	if len(files) == 0 {
		files[strings.ToLower(w.Name)+"/__init__.py"] = fmt.Sprintf("VERSION = %q\n", w.Version)
	}
	di := w.distInfo()
	meta := fmt.Sprintf("Metadata-Version: 2.1\nName: %s\nVersion: %s\n", w.Name, w.Version)
	for _, r := range w.Requires {
		meta += "Requires-Dist: " + r + "\n"
	}
	files[di+"/METADATA"] = meta
	tag := strings.TrimSuffix(strings.TrimPrefix(w.FileName(), w.Name+"-"+w.Version+"-"), ".whl")
	files[di+"/WHEEL"] = "Wheel-Version: 1.0\nGenerator: thaw-pypitest\nRoot-Is-Purelib: true\nTag: " + tag + "\n"
	names := make([]string, 0, len(files))
	for k := range files {
		names = append(names, k)
	}
	sort.Strings(names)
	var record []string
	for _, n := range names {
		sum := sha256.Sum256([]byte(files[n]))
		record = append(record, fmt.Sprintf("%s,sha256=%s,%d", n, base64.RawURLEncoding.EncodeToString(sum[:]), len(files[n])))
	}
	for n := range w.Symlinks {
		record = append(record, n+",,")
	}
	record = append(record, di+"/RECORD,,")
	if w.EditRecord != nil {
		record = w.EditRecord(record)
	}
	return files, names, record
}

// add writes one entry, its header claiming DeclaredSize if set.
func (w Wheel) add(zw *zip.Writer, name, body string) error {
	if size, ok := w.DeclaredSize[name]; ok {
		h := &zip.FileHeader{Name: name, Method: zip.Store, CRC32: crc32.ChecksumIEEE([]byte(body)),
			CompressedSize64: uint64(len(body)), UncompressedSize64: size}
		h.SetMode(0o644)
		fw, err := zw.CreateRaw(h)
		if err != nil {
			return err
		}
		_, err = fw.Write([]byte(body))
		return err
	}
	fw, err := zw.Create(name)
	if err != nil {
		return err
	}
	_, err = fw.Write([]byte(body))
	return err
}

// Sdist writes a source distribution name-version.tar.gz into dir: an
// archive thaw must refuse to build (its content is never looked at).
func Sdist(t testing.TB, dir, name, version string) string {
	t.Helper()
	p := filepath.Join(dir, name+"-"+version+".tar.gz")
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	setup := []byte("raise SystemExit('never run')\n")
	if err := tw.WriteHeader(&tar.Header{Name: name + "-" + version + "/setup.py", Mode: 0o644, Size: int64(len(setup))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(setup); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
