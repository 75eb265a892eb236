package deps

import (
	"archive/zip"
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Bounds of what a wheel may hold: a wheel is an untrusted archive.
const (
	MaxWheelEntries = 50_000    // entries of one wheel
	MaxEntryBytes   = 256 << 20 // one file, uncompressed
	MaxWheelBytes   = 1 << 30   // one wheel, uncompressed
	MaxLayerBytes   = 2 << 30   // every wheel of a layer together
	maxPathLen      = 1024
	maxPathDepth    = 32
	maxMetaFile     = 4 << 20 // WHEEL, METADATA, RECORD
)

// Limits bound an installation (the constants above; tests pass smaller).
type Limits struct {
	Entries    int
	EntryBytes int64
	WheelBytes int64
	LayerBytes int64
}

// DefaultLimits are the constants.
var DefaultLimits = Limits{Entries: MaxWheelEntries, EntryBytes: MaxEntryBytes, WheelBytes: MaxWheelBytes, LayerBytes: MaxLayerBytes}

// Layout of an installed layer, relative to its root (the guest mounts it
// at /deps): site/ is the site directory (purelib and platlib), and the
// .data directories' scripts, headers and data go beside it.
const (
	SiteDir    = "site"
	scriptsDir = "bin"
	headersDir = "include"
	dataDir    = "data"
)

// installer installs wheels into one tree, remembering every file so that
// two entries never land on one path.
type installer struct {
	root   string
	limits Limits
	total  int64
	owner  map[string]string // path in the tree -> wheel that put it there
}

func newInstaller(root string, limits Limits) *installer {
	return &installer{root: root, limits: limits, owner: map[string]string{}}
}

// wheelErr is ErrBadWheel naming the wheel and the entry.
func wheelErr(wheel, entry, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if entry != "" {
		return invalid(ErrBadWheel, "%s: entry %q: %s", wheel, entry, msg)
	}
	return invalid(ErrBadWheel, "%s: %s", wheel, msg)
}

// recordEntry is one line of RECORD.
type recordEntry struct {
	algo, digest string
	size         int64
	hasSize      bool
}

// install unpacks the wheel file (named name) into the tree, following
// the wheel spec: the .dist-info directory and the root go to site/ (pure
// or platform: the guest has one site directory), <dist>.data/purelib and
// platlib to site/, scripts to bin/, headers to include/<dist>/, data to
// data/. Every entry is checked before anything is written for it.
func (in *installer) install(file string) error {
	name := filepath.Base(file)
	wn, err := ParseWheelName(name)
	if err != nil {
		return wheelErr(name, "", "%v", err)
	}
	zr, err := zip.OpenReader(file)
	if err != nil && !errors.Is(err, zip.ErrInsecurePath) { // insecure names are refused below, by name
		return wheelErr(name, "", "not a zip archive: %v", err)
	}
	defer zr.Close()
	if len(zr.File) > in.limits.Entries {
		return wheelErr(name, "", "%d entries, more than %d", len(zr.File), in.limits.Entries)
	}
	entries, err := in.checkEntries(name, zr.File)
	if err != nil {
		return err
	}
	distInfo, err := findDistInfo(name, wn, entries)
	if err != nil {
		return err
	}
	if err := checkMetadata(name, wn, distInfo, entries); err != nil {
		return err
	}
	record, err := readRecord(name, distInfo, entries)
	if err != nil {
		return err
	}
	for p := range record {
		if _, ok := entries[p]; !ok {
			return wheelErr(name, p, "listed in RECORD but not in the wheel")
		}
	}
	dataPrefix := strings.TrimSuffix(distInfo, ".dist-info") + ".data/"
	for _, f := range zr.File {
		if strings.HasSuffix(f.Name, "/") {
			continue
		}
		target, err := mapTarget(name, f.Name, dataPrefix, wn.Name)
		if err != nil {
			return err
		}
		if err := in.extract(name, f, target, record); err != nil {
			return err
		}
	}
	return nil
}

// checkEntries checks every entry's name, type and declared size before
// anything is extracted, and indexes the files by name.
func (in *installer) checkEntries(wheel string, files []*zip.File) (map[string]*zip.File, error) {
	entries := map[string]*zip.File{}
	dirs := map[string]bool{}
	var total uint64
	for _, f := range files {
		name := strings.TrimSuffix(f.Name, "/")
		if err := checkPath(name); err != nil {
			return nil, wheelErr(wheel, f.Name, "%v", err)
		}
		mode := f.Mode()
		isDir := strings.HasSuffix(f.Name, "/") || mode.IsDir()
		switch {
		case mode&fs.ModeSymlink != 0:
			return nil, wheelErr(wheel, f.Name, "is a symbolic link; wheels install regular files only")
		case !isDir && !mode.IsRegular():
			return nil, wheelErr(wheel, f.Name, "is not a regular file (%s)", mode.Type())
		}
		if isDir {
			dirs[name] = true
			continue
		}
		if _, dup := entries[name]; dup {
			return nil, wheelErr(wheel, f.Name, "appears twice")
		}
		if f.UncompressedSize64 > uint64(in.limits.EntryBytes) {
			return nil, wheelErr(wheel, f.Name, "%d bytes uncompressed, more than %s", f.UncompressedSize64, sizeText(in.limits.EntryBytes))
		}
		if total += f.UncompressedSize64; total > uint64(in.limits.WheelBytes) {
			return nil, wheelErr(wheel, "", "more than %s uncompressed", sizeText(in.limits.WheelBytes))
		}
		entries[name] = f
	}
	for name := range entries {
		if dirs[name] {
			return nil, wheelErr(wheel, name, "is both a file and a directory")
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if _, clash := entries[p]; clash {
				return nil, wheelErr(wheel, name, "lies under %q, which is a file", p)
			}
		}
	}
	return entries, nil
}

// checkPath refuses an entry name that is not a clean relative path
// inside the layer: absolute, '..', '.', empty components, backslashes,
// NUL or control characters, invalid UTF-8, too long or too deep. A clean
// name is its own normal form, so no two names reach one path.
func checkPath(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case !utf8.ValidString(name):
		return errors.New("name is not UTF-8")
	case len(name) > maxPathLen:
		return fmt.Errorf("name longer than %d bytes", maxPathLen)
	case strings.HasPrefix(name, "/"):
		return errors.New("absolute path")
	case strings.ContainsRune(name, '\\'):
		return errors.New("backslash in the name")
	case strings.Count(name, "/") >= maxPathDepth:
		return fmt.Errorf("nested deeper than %d directories", maxPathDepth)
	}
	for _, c := range name {
		if c < 0x20 || c == 0x7f {
			return errors.New("control character in the name")
		}
	}
	for _, part := range strings.Split(name, "/") {
		switch part {
		case "..":
			return errors.New("'..' leaves the layer")
		case ".", "":
			return errors.New("not a clean path ('.' or an empty component)")
		}
	}
	return nil
}

// findDistInfo is the wheel's one top-level .dist-info directory, which
// must name the wheel's project and version.
func findDistInfo(wheel string, wn WheelName, entries map[string]*zip.File) (string, error) {
	found := map[string]bool{}
	for name := range entries {
		top, _, _ := strings.Cut(name, "/")
		if strings.HasSuffix(top, ".dist-info") {
			found[top] = true
		}
	}
	if len(found) != 1 {
		return "", wheelErr(wheel, "", "has %d .dist-info directories, want exactly one", len(found))
	}
	var dir string
	for d := range found {
		dir = d
	}
	n, v, ok := strings.Cut(strings.TrimSuffix(dir, ".dist-info"), "-")
	if !ok || Normalize(n) != wn.Name || v != wn.Version {
		return "", wheelErr(wheel, dir, "does not name the wheel's project and version (%s %s)", wn.Name, wn.Version)
	}
	return dir, nil
}

// checkMetadata checks WHEEL (version 1.x) and METADATA (the wheel's name
// and version).
func checkMetadata(wheel string, wn WheelName, distInfo string, entries map[string]*zip.File) error {
	w, err := readHeaders(wheel, entries, distInfo+"/WHEEL")
	if err != nil {
		return err
	}
	if v := w["Wheel-Version"]; !strings.HasPrefix(v, "1.") {
		return wheelErr(wheel, distInfo+"/WHEEL", "Wheel-Version %q; this installer reads 1.x", v)
	}
	m, err := readHeaders(wheel, entries, distInfo+"/METADATA")
	if err != nil {
		return err
	}
	if Normalize(m["Name"]) != wn.Name || m["Version"] != wn.Version {
		return wheelErr(wheel, distInfo+"/METADATA", "names %s %s, the file name %s %s", m["Name"], m["Version"], wn.Name, wn.Version)
	}
	return nil
}

// readHeaders reads the RFC 822 style header block of a metadata file.
func readHeaders(wheel string, entries map[string]*zip.File, name string) (map[string]string, error) {
	b, err := readSmall(wheel, entries, name)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), maxMetaFile)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, " ") {
			if _, set := out[k]; !set {
				out[k] = strings.TrimSpace(v)
			}
		}
	}
	return out, nil
}

func readSmall(wheel string, entries map[string]*zip.File, name string) ([]byte, error) {
	f, ok := entries[name]
	if !ok {
		return nil, wheelErr(wheel, "", "has no %s", name)
	}
	if f.UncompressedSize64 > maxMetaFile {
		return nil, wheelErr(wheel, name, "larger than %d MiB", maxMetaFile>>20)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, wheelErr(wheel, name, "%v", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxMetaFile+1))
	if err != nil || len(b) > maxMetaFile {
		return nil, wheelErr(wheel, name, "unreadable: %v", err)
	}
	return b, nil
}

// readRecord parses RECORD: every file of the wheel but RECORD itself
// (and its signatures) must be listed with a sha256/384/512 digest.
func readRecord(wheel, distInfo string, entries map[string]*zip.File) (map[string]recordEntry, error) {
	name := distInfo + "/RECORD"
	b, err := readSmall(wheel, entries, name)
	if err != nil {
		return nil, err
	}
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = 3
	rows, err := r.ReadAll()
	if err != nil {
		return nil, wheelErr(wheel, name, "not a 3-column CSV: %v", err)
	}
	out := map[string]recordEntry{}
	for _, row := range rows {
		p := row[0]
		if err := checkPath(p); err != nil {
			return nil, wheelErr(wheel, name, "lists %q: %v", p, err)
		}
		if _, dup := out[p]; dup {
			return nil, wheelErr(wheel, name, "lists %q twice", p)
		}
		e := recordEntry{}
		if row[1] != "" {
			algo, digest, ok := strings.Cut(row[1], "=")
			if !ok || (algo != "sha256" && algo != "sha384" && algo != "sha512") {
				return nil, wheelErr(wheel, name, "%q: hash %q is not sha256=, sha384= or sha512=", p, row[1])
			}
			e.algo, e.digest = algo, digest
		}
		if row[2] != "" {
			n, err := strconv.ParseInt(row[2], 10, 64)
			if err != nil || n < 0 {
				return nil, wheelErr(wheel, name, "%q: size %q", p, row[2])
			}
			e.size, e.hasSize = n, true
		}
		out[p] = e
	}
	for p := range entries {
		if p == name || p == distInfo+"/RECORD.jws" || p == distInfo+"/RECORD.p7s" {
			continue
		}
		if e, ok := out[p]; !ok || e.algo == "" {
			return nil, wheelErr(wheel, p, "missing from RECORD (or listed without a hash)")
		}
	}
	return out, nil
}

// mapTarget is where an entry goes in the tree.
func mapTarget(wheel, name, dataPrefix, project string) (string, error) {
	rest, ok := strings.CutPrefix(name, dataPrefix)
	if !ok {
		return path.Join(SiteDir, name), nil
	}
	key, sub, ok := strings.Cut(rest, "/")
	if !ok || sub == "" {
		return "", wheelErr(wheel, name, "a file directly in the .data directory")
	}
	switch key {
	case "purelib", "platlib":
		return path.Join(SiteDir, sub), nil
	case "scripts":
		return path.Join(scriptsDir, sub), nil
	case "headers":
		return path.Join(headersDir, project, sub), nil
	case "data":
		return path.Join(dataDir, sub), nil
	}
	return "", wheelErr(wheel, name, "unknown .data directory %q (want purelib, platlib, scripts, headers or data)", key)
}

// extract writes one entry to target (relative to the tree), checking its
// size and digest against RECORD as it is written.
func (in *installer) extract(wheel string, f *zip.File, target string, record map[string]recordEntry) error {
	if prev, taken := in.owner[target]; taken {
		return wheelErr(wheel, f.Name, "would overwrite %s, installed by %s", target, prev)
	}
	in.owner[target] = wheel
	if in.total += int64(f.UncompressedSize64); in.total > in.limits.LayerBytes {
		return invalid(ErrBadWheel, "the wheels together are more than %s uncompressed (at %s in %s)", sizeText(in.limits.LayerBytes), f.Name, wheel)
	}
	dst := filepath.Join(in.root, filepath.FromSlash(target))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return wheelErr(wheel, f.Name, "%v", err)
	}
	perm := os.FileMode(0o644)
	if f.Mode()&0o111 != 0 || strings.HasPrefix(target, scriptsDir+"/") {
		perm = 0o755
	}
	rc, err := f.Open()
	if err != nil {
		return wheelErr(wheel, f.Name, "%v", err)
	}
	defer rc.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return wheelErr(wheel, f.Name, "%v", err)
	}
	rec := record[f.Name]
	h := newHash(rec.algo)
	w := &shebangWriter{w: out, done: !strings.HasPrefix(target, scriptsDir+"/")}
	n, err := io.Copy(io.MultiWriter(w, h), io.LimitReader(rc, in.limits.EntryBytes+1))
	if err == nil {
		err = w.flush()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return wheelErr(wheel, f.Name, "%v", err)
	case n > in.limits.EntryBytes:
		return wheelErr(wheel, f.Name, "more than %s uncompressed", sizeText(in.limits.EntryBytes))
	case rec.hasSize && n != rec.size:
		return wheelErr(wheel, f.Name, "%d bytes, RECORD says %d", n, rec.size)
	case rec.algo != "" && base64.RawURLEncoding.EncodeToString(h.Sum(nil)) != strings.TrimRight(rec.digest, "="):
		return wheelErr(wheel, f.Name, "content does not match its %s in RECORD", rec.algo)
	}
	return nil
}

// sizeText is a bound for messages: MiB when whole, else bytes.
func sizeText(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "sha384":
		return sha512.New384()
	case "sha512":
		return sha512.New()
	}
	return sha256.New()
}

// shebangWriter rewrites a script's "#!python" first line to the guest's
// interpreter, as installers do.
type shebangWriter struct {
	w    io.Writer
	done bool
	head []byte
}

func (s *shebangWriter) Write(p []byte) (int, error) {
	if s.done {
		return s.w.Write(p)
	}
	s.head = append(s.head, p...)
	if len(s.head) < len("#!pythonw") && !bytes.Contains(s.head, []byte("\n")) {
		return len(p), nil
	}
	if err := s.flush(); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes what is held back (a script shorter than its shebang).
func (s *shebangWriter) flush() error {
	if s.done {
		return nil
	}
	s.done = true
	head := s.head
	for _, prefix := range []string{"#!pythonw", "#!python"} {
		if rest, ok := bytes.CutPrefix(head, []byte(prefix)); ok && (len(rest) == 0 || rest[0] == '\n' || rest[0] == '\r' || rest[0] == ' ') {
			head = append([]byte("#!/usr/bin/python3"), rest...)
			break
		}
	}
	_, err := s.w.Write(head)
	return err
}
