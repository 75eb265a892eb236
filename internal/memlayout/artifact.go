package memlayout

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
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
	SnapBPFManifestFile = "snapbpf.json"
	WorkingSetDataFile  = "ws.bin"
)

// Manifest magics.
const (
	FaaSnapMagic = "thaw-faasnap"
	REAPMagic    = "thaw-reap"
	SnapBPFMagic = "thaw-snapbpf"
)

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
// used with (ErrMismatch) and its data file name's size and, when full,
// digest (ErrCorrupt).
func verifyData(h *ArtifactHeader, name string, data FileRef, memSize int64, memSHA256 string, full bool) error {
	if err := h.verifyMemory(memSize, memSHA256); err != nil {
		return err
	}
	path := filepath.Join(h.Dir, name)
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
// stamp it had when opened and the digest the caller expects of it.
type memSource struct {
	path  string
	f     *os.File
	stamp snapshot.Stamp
	pages uint64
	want  string // expected SHA-256, "" for any
	sum   string // SHA-256, once hashed
}

// openMemory opens the memory file at path, expected to have SHA-256 want
// (if not empty), and refuses pages outside it.
func openMemory(path, want string, pages []uint64) (*memSource, error) {
	if want != "" && !validHex256(want) {
		return nil, fmt.Errorf("memory sha256 %q is not a SHA-256", want)
	}
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
	m := &memSource{path: path, f: f, stamp: stamp, pages: PagesOf(stamp.Size), want: want}
	if err := m.checkPages(pages); err != nil {
		f.Close()
		return nil, err
	}
	return m, nil
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

// hashed records the memory file's digest sum, found by reading size
// bytes, after checking size against the stamp and sum against the
// caller's (ErrMismatch).
func (m *memSource) hashed(size int64, sum string) error {
	if size != m.stamp.Size {
		return fmt.Errorf("memory file %s changed while the artifact was built", m.path)
	}
	if m.want != "" && sum != m.want {
		return fmt.Errorf("%w: memory file %s has sha256 %s, expected %s", ErrMismatch, m.path, short(sum), short(m.want))
	}
	m.sum = sum
	return nil
}

// hash hashes the whole memory file and records its digest (hashed),
// failing if the file changed meanwhile.
func (m *memSource) hash() error {
	fi, err := snapshot.HashFile(m.path)
	if err != nil {
		return err
	}
	if err := m.unchanged(); err != nil {
		return err
	}
	return m.hashed(fi.Size, fi.SHA256)
}

// ref is the memory file's entry in a manifest.
func (m *memSource) ref() FileRef { return FileRef{Size: m.stamp.Size, SHA256: m.sum} }

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

// publish makes a data file (if any) and its manifest visible: the old
// manifest goes first, so a crash never leaves a manifest next to a data
// file it does not describe; the new manifest comes last, so its presence
// means the artifact is complete. Both temporary files are removed on
// error.
func publish(dir string, data, manifest *tempFile) error {
	if data != nil {
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
