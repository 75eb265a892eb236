package memlayout

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/snapshot"
)

// FormatVersion is the version of the artifact formats written here. It
// changes only when a format does; readers refuse newer versions
// (ErrIncompatible) rather than guessing.
const FormatVersion = 1

// Artifact file names inside an artifact directory.
const (
	FaaSnapManifestFile = "faasnap.json"
	LoadingSetDataFile  = "loadingset.bin"
	REAPManifestFile    = "reap.json"
	WorkingSetDataFile  = "ws.bin"
)

// Manifest magics.
const (
	FaaSnapMagic = "thaw-faasnap"
	REAPMagic    = "thaw-reap"
)

// FileRef is the size and SHA-256 (lowercase hex, over every byte, holes as
// zeros) of a file.
type FileRef struct {
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

func validHex256(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// checksumOf is the SHA-256 of v's JSON encoding; v must have its checksum
// field cleared.
func checksumOf(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// decodeHeader reads magic and format_version leniently, so a manifest of a
// newer version is reported as incompatible even if its fields changed.
func decodeHeader(b []byte, magic string) error {
	var h struct {
		Magic         string `json:"magic"`
		FormatVersion int64  `json:"format_version"`
	}
	if err := json.Unmarshal(b, &h); err != nil {
		return fmt.Errorf("%w: manifest is not valid JSON: %v", ErrCorrupt, err)
	}
	if h.Magic != magic {
		return fmt.Errorf("%w: manifest magic %q, want %q", ErrCorrupt, truncate([]byte(h.Magic)), magic)
	}
	if h.FormatVersion > FormatVersion {
		return fmt.Errorf("%w: format version %d, this thaw reads version %d", ErrIncompatible, h.FormatVersion, FormatVersion)
	}
	if h.FormatVersion < 1 {
		return fmt.Errorf("%w: format version %d", ErrCorrupt, h.FormatVersion)
	}
	return nil
}

// decodeStrict decodes exactly one JSON value into v, refusing unknown
// fields and trailing data.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: manifest: data after the JSON object", ErrCorrupt)
	}
	return nil
}

// encoder is a manifest that can seal and encode itself.
type encoder interface{ Encode() ([]byte, error) }

// sealable is a pointer to a manifest with a self-checksum field.
type sealable[T any] interface {
	*T
	encoder
	checksum() *string
}

// seal sets a's checksum to the SHA-256 of a with the checksum cleared and
// returns a's canonical JSON (one line).
func seal[T any, P sealable[T]](a P) ([]byte, error) {
	c := *a
	*P(&c).checksum() = ""
	sum, err := checksumOf(&c)
	if err != nil {
		return nil, err
	}
	*a.checksum() = sum
	b, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// unseal checks the checksum of a, decoded from b, and that b is exactly
// a's canonical encoding.
func unseal[T any, P sealable[T]](b []byte, a P) error {
	c := *a
	*P(&c).checksum() = ""
	sum, err := checksumOf(&c)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if sum != *a.checksum() {
		return fmt.Errorf("%w: manifest checksum mismatch", ErrCorrupt)
	}
	return checkCanonical(b, P(&c))
}

// checkRuns checks runs of pages (what names them in errors): each
// non-empty and inside a memory of pages pages, none continuing the one
// before it (runs are maximal in their order), no page in two runs. It
// returns the pages they hold (at most pages).
func checkRuns(what string, runs []PageRun, pages uint64) (uint64, error) {
	for i, r := range runs {
		if err := checkRegion(what, i, r, pages); err != nil {
			return 0, err
		}
		if i > 0 && r.Start == runs[i-1].End() {
			return 0, fmt.Errorf("%w: %s %d continues %s %d", ErrCorrupt, what, i, what, i-1)
		}
	}
	sorted := append([]PageRun(nil), runs...)
	sortRegions(sorted)
	var total uint64
	for i, r := range sorted {
		if i > 0 && r.Start < sorted[i-1].End() {
			return 0, fmt.Errorf("%w: page %d is in two %ss", ErrCorrupt, r.Start, what)
		}
		total += r.Pages
	}
	return total, nil
}

// checkCanonical requires b to be exactly the encoding of the manifest it
// decoded to (m, a copy it may modify). The checksum covers the decoded
// values; this covers every byte too, since encoding/json would otherwise
// accept edits that decode alike (a key's case, spacing, field order).
func checkCanonical(b []byte, m encoder) error {
	enc, err := m.Encode()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	if !bytes.Equal(enc, b) {
		return fmt.Errorf("%w: manifest is not in canonical form (edited?)", ErrCorrupt)
	}
	return nil
}

// checkMemory checks a manifest's memory entry and returns its page count.
func checkMemory(m FileRef) (uint64, error) {
	if m.Size <= 0 {
		return 0, fmt.Errorf("%w: memory size %d", ErrCorrupt, m.Size)
	}
	if !validHex256(m.SHA256) {
		return 0, fmt.Errorf("%w: memory sha256 %q is not a SHA-256", ErrCorrupt, truncate([]byte(m.SHA256)))
	}
	return PagesOf(m.Size), nil
}

// checkRegion checks that r (what[i]) is non-empty and inside [0, pages).
func checkRegion(what string, i int, r PageRun, pages uint64) error {
	if r.Pages == 0 || r.Start >= pages || r.Pages > pages-r.Start {
		return fmt.Errorf("%w: %s %d [%d,%d] is empty or outside memory of %d pages", ErrCorrupt, what, i, r.Start, r.Pages, pages)
	}
	return nil
}

// checkDataSize checks a data file's size and digest format against the
// number of pages it must hold (pages never exceeds a memory's page count,
// so pages*PageSize cannot overflow).
func checkDataSize(name string, f FileRef, pages uint64) error {
	if f.Size < 0 || uint64(f.Size) != pages*PageSize {
		return fmt.Errorf("%w: %s size %d, regions hold %d pages (%d bytes)", ErrCorrupt, name, f.Size, pages, pages*PageSize)
	}
	if !validHex256(f.SHA256) {
		return fmt.Errorf("%w: %s sha256 %q is not a SHA-256", ErrCorrupt, name, truncate([]byte(f.SHA256)))
	}
	return nil
}

// verifyData checks an artifact against the snapshot memory it is to be
// used with (ErrMismatch) and its data file's size and, when full, digest
// (ErrCorrupt).
func verifyData(dir, name string, mem FileRef, data FileRef, memSize int64, memSHA256 string, full bool) error {
	if mem.Size != memSize || mem.SHA256 != memSHA256 {
		return fmt.Errorf("%w: %s was built from memory %s (%d bytes), snapshot memory is %s (%d bytes)",
			ErrMismatch, dir, short(mem.SHA256), mem.Size, short(memSHA256), memSize)
	}
	path := filepath.Join(dir, name)
	if err := checkDataFile(path, data.Size); err != nil {
		return err
	}
	if !full {
		return nil
	}
	got, err := snapshot.HashFile(path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
	}
	if got.Size != data.Size || got.SHA256 != data.SHA256 {
		return fmt.Errorf("%w: %s checksum mismatch", ErrCorrupt, path)
	}
	return nil
}

func checkDataFile(path string, size int64) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	if !st.Mode().IsRegular() || st.Size() != size {
		return fmt.Errorf("%w: %s is %d bytes, manifest says %d", ErrCorrupt, path, st.Size(), size)
	}
	return nil
}

func short(sum string) string {
	if len(sum) > 12 {
		return sum[:12]
	}
	return sum
}

// memSource is a memory file opened for building an artifact, with the
// stamp it had when opened.
type memSource struct {
	path  string
	f     *os.File
	stamp snapshot.Stamp
	pages uint64
}

func openMemory(path string) (*memSource, error) {
	stamp, err := snapshot.StampOf(path)
	if err != nil {
		return nil, err
	}
	if stamp.Size <= 0 {
		return nil, fmt.Errorf("memory file %s is empty", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	return &memSource{path: path, f: f, stamp: stamp, pages: PagesOf(stamp.Size)}, nil
}

func (m *memSource) Close() error { return m.f.Close() }

// checkPages refuses pages outside the memory file.
func (m *memSource) checkPages(pages []uint64) error {
	for _, p := range pages {
		if p >= m.pages {
			return fmt.Errorf("page %d is outside memory file %s (%d pages)", p, m.path, m.pages)
		}
	}
	return nil
}

// unchanged fails if the memory file was modified since it was opened.
func (m *memSource) unchanged() error {
	st, err := snapshot.StampOf(m.path)
	if err != nil {
		return err
	}
	if st != m.stamp {
		return fmt.Errorf("memory file %s changed while the artifact was built", m.path)
	}
	return nil
}

// checkDigest compares the memory file's digest with the caller's.
func checkDigest(path, got, want string) error {
	if want != "" && got != want {
		return fmt.Errorf("%w: memory file %s has sha256 %s, expected %s", ErrMismatch, path, short(got), short(want))
	}
	return nil
}

// copyPages writes the pages of regions, in the order given, from the memory
// file to w; a partial last page of memory is padded with zeros.
func (m *memSource) copyPages(w io.Writer, regions []PageRun) error {
	buf := make([]byte, scanChunk)
	size := uint64(m.stamp.Size)
	for _, r := range regions {
		end := r.End() * PageSize
		for b := r.Start * PageSize; b < end; {
			want := min(uint64(len(buf)), end-b)
			var have uint64
			if b < size {
				have = min(want, size-b)
			}
			n, err := m.f.ReadAt(buf[:have], int64(b))
			if uint64(n) != have {
				return fmt.Errorf("read %s at %d: short read (file changed?): %v", m.path, b+uint64(n), err)
			}
			clear(buf[have:want])
			if _, err := w.Write(buf[:want]); err != nil {
				return err
			}
			b += want
		}
	}
	return nil
}

// tempFile is a file written under a temporary name in dir.
type tempFile struct {
	f    *os.File
	name string // final name
}

// writeTemp creates a temporary file in dir, lets fill write it through a
// buffer while hashing, fsyncs and closes it, and returns it with its
// size and digest. On error the temporary file is removed.
func writeTemp(dir, name string, fill func(io.Writer) error) (*tempFile, FileRef, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return nil, FileRef{}, err
	}
	t := &tempFile{f: f, name: name}
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	bw := bufio.NewWriterSize(cw, scanChunk)
	err = fill(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return nil, FileRef{}, fmt.Errorf("write %s: %w", filepath.Join(dir, name), err)
	}
	return t, FileRef{Size: cw.n, SHA256: hexSum(h)}, nil
}

func (t *tempFile) discard() {
	if t != nil {
		os.Remove(t.f.Name())
	}
}

func hexSum(h hash.Hash) string { return hex.EncodeToString(h.Sum(nil)) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// publish makes a data file and its manifest visible: the old manifest (if
// any) goes first, so a crash never leaves a manifest next to a data file it
// does not describe; the new manifest comes last, so its presence means the
// artifact is complete. Both temporary files are removed on error.
// sealAndPublish encodes a manifest, checks that readers accept it (never
// publish what readers refuse), writes it beside its data file and
// publishes both; on any error the temporary files are removed.
func sealAndPublish(dir, name string, data *tempFile, encode func() ([]byte, error), decode func([]byte) error) error {
	b, err := encode()
	if err != nil {
		data.discard()
		return err
	}
	if err := decode(b); err != nil {
		data.discard()
		return fmt.Errorf("internal error: built an invalid manifest: %w", err)
	}
	man, err := writeManifestTemp(dir, name, b)
	if err != nil {
		data.discard()
		return err
	}
	return publish(dir, data, man)
}

func publish(dir string, data, manifest *tempFile) error {
	err := os.Remove(filepath.Join(dir, manifest.name))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		data.discard()
		manifest.discard()
		return err
	}
	if err := os.Rename(data.f.Name(), filepath.Join(dir, data.name)); err != nil {
		data.discard()
		manifest.discard()
		return err
	}
	if err := snapshot.SyncDir(dir); err != nil {
		manifest.discard()
		return err
	}
	if err := os.Rename(manifest.f.Name(), filepath.Join(dir, manifest.name)); err != nil {
		manifest.discard()
		return err
	}
	return snapshot.SyncDir(dir)
}

// writeManifestTemp writes manifest bytes to a temporary file in dir.
func writeManifestTemp(dir, name string, b []byte) (*tempFile, error) {
	t, _, err := writeTemp(dir, name, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
	return t, err
}
