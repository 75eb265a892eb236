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

	"github.com/thaw-dev/thaw/internal/atomicfile"
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
	in, st, err := openStat(src)
	if err != nil {
		return FileInfo{}, err
	}
	defer in.Close()
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

// openStat opens path for reading and stats it.
func openStat(path string) (*os.File, os.FileInfo, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

func copySparse(out, in *os.File, size int64) (FileInfo, error) {
	var allocated int64
	sum, err := hashSparse(in, size, func(off int64, chunk []byte) error {
		for p := 0; p < len(chunk); p += PageSize {
			page := chunk[p:min(p+PageSize, len(chunk))]
			if isZero(page) {
				continue
			}
			if _, err := out.WriteAt(page, off+int64(p)); err != nil {
				return err
			}
			allocated += int64(len(page))
		}
		return nil
	})
	if err != nil {
		return FileInfo{}, err
	}
	if err := out.Truncate(size); err != nil {
		return FileInfo{}, err
	}
	if err := out.Sync(); err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: size, SHA256: sum, Allocated: allocated}, nil
}

// DataExtents calls fn with each data extent [data, hole) of f, a file of
// size bytes, in order, as SEEK_DATA and SEEK_HOLE find them.
func DataExtents(f *os.File, size int64, fn func(data, hole int64) error) error {
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) { // only a hole remains
			return nil
		} else if err != nil {
			return fmt.Errorf("SEEK_DATA: %w", err)
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil {
			return fmt.Errorf("SEEK_HOLE: %w", err)
		}
		if err := fn(data, hole); err != nil {
			return err
		}
		off = hole
	}
	return nil
}

// hashSparse returns the SHA-256 of the first size bytes of f, reading only
// its data extents (holes hash as zeros), and hands each chunk it read to
// each (if not nil) with its offset.
func hashSparse(f *os.File, size int64, each func(off int64, chunk []byte) error) (string, error) {
	h := sha256.New()
	buf := make([]byte, copyChunk)
	var done int64 // bytes hashed
	zeros := func(end int64) {
		for done < end {
			n := min(copyChunk, end-done)
			h.Write(zeroChunk[:n])
			done += n
		}
	}
	err := DataExtents(f, size, func(data, hole int64) error {
		zeros(min(data, size))
		for end := min(hole, size); done < end; {
			n, err := f.ReadAt(buf[:min(copyChunk, end-done)], done)
			if err != nil && !errors.Is(err, io.EOF) {
				return err
			}
			if n == 0 {
				return fmt.Errorf("short read at %d", done)
			}
			h.Write(buf[:n])
			if each != nil {
				if err := each(done, buf[:n]); err != nil {
					return err
				}
			}
			done += int64(n)
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	zeros(size)
	return hex.EncodeToString(h.Sum(nil)), nil
}

func isZero(b []byte) bool {
	return bytes.Equal(b, zeroChunk[:len(b)])
}

// HashFile returns the size and SHA-256 of a file, skipping the reads of
// holes (they hash as zeros).
func HashFile(path string) (FileInfo, error) {
	f, st, err := openStat(path)
	if errors.Is(err, os.ErrNotExist) {
		return FileInfo{}, fmt.Errorf("%w: %s", ErrMissing, path)
	}
	if err != nil {
		return FileInfo{}, err
	}
	defer f.Close()
	size := st.Size()
	sum, err := hashSparse(f, size, nil)
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Size: size, SHA256: sum, Allocated: st.Sys().(*syscall.Stat_t).Blocks * 512}, nil
}

// WriteFileSync writes data to path and fsyncs it.
func WriteFileSync(path string, data []byte) error {
	return WriteSync(path, os.O_TRUNC, func(f *os.File) error {
		_, err := f.Write(data)
		return err
	})
}

// WriteSync opens path for writing (created, mode 0600, with flag added:
// os.O_TRUNC to replace a file, os.O_EXCL to insist on a new one), fills
// it with write, fsyncs and closes it. The file is closed whatever fails.
func WriteSync(path string, flag int, write func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|flag, 0o600)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
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
func SyncDir(dir string) error { return atomicfile.Sync(dir) }

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

// CheckLazy checks a lazy snapshot in dir, whose memory is in a registry:
// the manifest and the device state as Check does, the memory file (a
// placeholder) by its size only. Its pages are verified chunk by chunk
// when fetched, against the digests the manifest's memory digest names.
func CheckLazy(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	if err := checkFile(dir, StateFile, m.Files[StateFile], nil); err != nil {
		return nil, err
	}
	st, err := StampOf(filepath.Join(dir, MemoryFile))
	if err != nil {
		return nil, err
	}
	if want := m.Files[MemoryFile].Size; st.Size != want {
		return nil, fmt.Errorf("%w: memory placeholder is %d bytes, manifest says %d", ErrCorrupt, st.Size, want)
	}
	return m, nil
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
