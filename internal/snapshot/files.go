package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// PageSize is the granularity of hole detection in memory files.
const PageSize = 4096

const copyChunk = 1 << 20

var zeroChunk = make([]byte, copyChunk)

// CopySparse copies src to dst page by page, leaving all-zero pages as holes
// so the copy of a 512 MiB guest that touched 100 MiB takes about 100 MiB of
// disk. It returns the file's description (size, SHA-256 over every byte,
// allocated bytes) and fsyncs dst. Holes in src are found with SEEK_DATA so
// untouched RAM is neither read nor written.
func CopySparse(dst, src string) (FileInfo, error) {
	in, err := os.Open(src)
	if err != nil {
		return FileInfo{}, err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return FileInfo{}, err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return FileInfo{}, err
	}
	fi, err := copySparse(out, in, st.Size())
	if cerr := out.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return FileInfo{}, fmt.Errorf("copy %s: %w", src, err)
	}
	return fi, nil
}

func copySparse(out, in *os.File, size int64) (FileInfo, error) {
	h := sha256.New()
	buf := make([]byte, copyChunk)
	var allocated int64
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			data = size // only a hole remains
		} else if err != nil {
			return FileInfo{}, fmt.Errorf("seek data: %w", err)
		}
		for ; off < data; off += copyChunk { // hash the hole as zeros
			h.Write(zeroChunk[:min(copyChunk, data-off)])
		}
		off = data
		if off >= size {
			break
		}
		n, err := in.ReadAt(buf[:min(copyChunk, size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return FileInfo{}, err
		}
		if n == 0 {
			return FileInfo{}, fmt.Errorf("short read at %d", off)
		}
		chunk := buf[:n]
		h.Write(chunk)
		for p := 0; p < n; p += PageSize {
			page := chunk[p:min(p+PageSize, n)]
			if isZero(page) {
				continue
			}
			if _, err := out.WriteAt(page, off+int64(p)); err != nil {
				return FileInfo{}, err
			}
			allocated += int64(len(page))
		}
		off += int64(n)
	}
	if err := out.Truncate(size); err != nil {
		return FileInfo{}, err
	}
	if err := out.Sync(); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), Allocated: allocated}, nil
}

func isZero(b []byte) bool {
	return bytes.Equal(b, zeroChunk[:len(b)])
}

// HashFile returns the size and SHA-256 of a file, skipping the reads of
// holes (they hash as zeros).
func HashFile(path string) (FileInfo, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return FileInfo{}, fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return FileInfo{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return FileInfo{}, err
	}
	h := sha256.New()
	buf := make([]byte, copyChunk)
	size := st.Size()
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(f.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			data = size
		} else if err != nil {
			return FileInfo{}, err
		}
		for ; off < data; off += copyChunk {
			h.Write(zeroChunk[:min(copyChunk, data-off)])
		}
		off = data
		if off >= size {
			break
		}
		n, err := f.ReadAt(buf[:min(copyChunk, size-off)], off)
		if n == 0 && err != nil {
			return FileInfo{}, err
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	return FileInfo{Size: size, SHA256: hex.EncodeToString(h.Sum(nil)), Allocated: st.Sys().(*syscall.Stat_t).Blocks * 512}, nil
}

// WriteFileSync writes data to path and fsyncs it.
func WriteFileSync(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SyncDir fsyncs a directory so renames and creations in it are durable.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// Commit seals a snapshot being written in tmpDir: it hashes the state file,
// writes the manifest, fsyncs everything and renames tmpDir to finalDir.
// The memory file entry must already be in m.Files (CopySparse returns it).
// On error tmpDir is left for the caller to remove.
func Commit(tmpDir, finalDir string, m *Manifest) error {
	st, err := HashFile(filepath.Join(tmpDir, StateFile))
	if err != nil {
		return fmt.Errorf("hash device state: %w", err)
	}
	if st.Size == 0 {
		return fmt.Errorf("%w: device state is empty", ErrCorrupt)
	}
	f, err := os.Open(filepath.Join(tmpDir, StateFile))
	if err != nil {
		return err
	}
	err = f.Sync()
	f.Close()
	if err != nil {
		return fmt.Errorf("sync device state: %w", err)
	}
	if m.Files == nil {
		m.Files = map[string]FileInfo{}
	}
	m.Files[StateFile] = st
	b, err := m.Encode()
	if err != nil {
		return err
	}
	if err := WriteFileSync(filepath.Join(tmpDir, ManifestFile), b); err != nil {
		return fmt.Errorf("write manifest: %w", err)
	}
	if err := SyncDir(tmpDir); err != nil {
		return err
	}
	if err := os.Rename(tmpDir, finalDir); err != nil {
		return fmt.Errorf("publish snapshot: %w", err)
	}
	return SyncDir(filepath.Dir(finalDir))
}

// Stamp identifies the exact on-disk version of a file cheaply. A memory
// file whose stamp still equals the one recorded when it was last fully
// verified need not be hashed again (the idea of git's index): a restore
// stays fast while any rewrite, truncation or replacement is caught.
type Stamp struct {
	Ino   uint64 `json:"ino"`
	Size  int64  `json:"size"`
	Mtime int64  `json:"mtime_ns"`
	Ctime int64  `json:"ctime_ns"`
}

// StampOf stats path.
func StampOf(path string) (Stamp, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return Stamp{}, fmt.Errorf("%w: %s", ErrMissing, path)
		}
		return Stamp{}, fmt.Errorf("stat %s: %w", path, err)
	}
	return Stamp{Ino: st.Ino, Size: st.Size, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano()}, nil
}

// Check verifies the snapshot in dir against its manifest. The device state
// is always hashed (about 1 MB). The memory file is hashed unless its stamp
// equals trusted (the stamp recorded at its last full verification); the
// returned stamp is the memory file's current one, to be recorded after a
// successful check.
func Check(dir string, trusted *Stamp) (*Manifest, Stamp, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, Stamp{}, err
	}
	if err := checkFile(dir, StateFile, m.Files[StateFile], nil); err != nil {
		return nil, Stamp{}, err
	}
	memPath := filepath.Join(dir, MemoryFile)
	if err := checkFile(dir, MemoryFile, m.Files[MemoryFile], trusted); err != nil {
		return nil, Stamp{}, err
	}
	st, err := StampOf(memPath)
	if err != nil {
		return nil, Stamp{}, err
	}
	return m, st, nil
}

// checkFile compares one file with its manifest entry: size always, content
// unless the file's stamp equals trusted.
func checkFile(dir, name string, want FileInfo, trusted *Stamp) error {
	path := filepath.Join(dir, name)
	st, err := StampOf(path)
	if err != nil {
		return err
	}
	if st.Size != want.Size {
		return fmt.Errorf("%w: %s is %d bytes, manifest says %d", ErrCorrupt, name, st.Size, want.Size)
	}
	if trusted != nil && *trusted == st {
		return nil
	}
	got, err := HashFile(path)
	if err != nil {
		return err
	}
	if got.SHA256 != want.SHA256 {
		return fmt.Errorf("%w: %s checksum mismatch", ErrCorrupt, name)
	}
	return nil
}
