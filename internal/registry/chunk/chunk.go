// Package chunk is how the registry stores a file: fixed-size chunks, the
// all-zero ones left out, each named by the SHA-256 of its bytes and
// compressed with zstd; and what storing a set of snapshots that way costs.
package chunk

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Scan reads the file at p in chunks of cs bytes and calls each for
// every chunk that holds a non-zero byte (data is reused between calls).
// It returns the file's size and SHA-256 (holes hash as zeros). Holes are
// skipped with SEEK_DATA, so a sparse guest memory file reads only its data.
func Scan(p string, cs int64, each func(index int64, data []byte) error) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	size := st.Size()
	h := sha256.New()
	buf := make([]byte, cs)
	var hashed int64 // bytes of the file hashed so far
	for idx := int64(0); idx*cs < size; idx++ {
		off := idx * cs
		n := min(cs, size-off)
		data, err := seekData(f, off)
		if err != nil {
			return 0, "", err
		}
		if data >= off+n { // the whole chunk is a hole
			continue
		}
		if _, err := f.ReadAt(buf[:n], off); err != nil && err != io.EOF {
			return 0, "", fmt.Errorf("read %s: %w", p, err)
		}
		if IsZero(buf[:n]) {
			continue
		}
		HashZeros(h, off-hashed)
		h.Write(buf[:n])
		hashed = off + n
		if err := each(idx, buf[:n]); err != nil {
			return 0, "", err
		}
	}
	HashZeros(h, size-hashed)
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// seekData returns the offset of the first data at or after off (the file
// size when none).
func seekData(f *os.File, off int64) (int64, error) {
	d, err := f.Seek(off, unix.SEEK_DATA)
	if errors.Is(err, unix.ENXIO) {
		return 1<<62 - 1, nil // no data after off
	}
	if err != nil {
		return off, nil // no SEEK_DATA here: read it
	}
	return d, nil
}

// Chunk sizes: a power of two in [MinSize, MaxSize].
const (
	MinSize = 64 << 10
	MaxSize = 8 << 20
)

// ErrCorrupt: an object's content does not match its name or digest.
var ErrCorrupt = errors.New("registry object corrupt")

var zeroPage [64 << 10]byte

// HashZeros writes n zero bytes to h.
func HashZeros(h hash.Hash, n int64) {
	for n > 0 {
		k := min(n, int64(len(zeroPage)))
		h.Write(zeroPage[:k])
		n -= k
	}
}

// IsZero says whether b holds only zero bytes.
func IsZero(b []byte) bool {
	for len(b) > 0 {
		k := min(len(b), len(zeroPage))
		if string(b[:k]) != string(zeroPage[:k]) {
			return false
		}
		b = b[k:]
	}
	return true
}

// SumHex is the SHA-256 of b in hex.
func SumHex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// The zstd coders are shared: both are safe for concurrent EncodeAll /
// DecodeAll.
var (
	coderOnce sync.Once
	encoder   *zstd.Encoder
	decoder   *zstd.Decoder
)

func coders() (*zstd.Encoder, *zstd.Decoder) {
	coderOnce.Do(func() {
		encoder, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
		decoder, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0), zstd.WithDecoderMaxMemory(MaxSize*2))
	})
	return encoder, decoder
}

// Compress returns the stored form of a chunk.
func Compress(dst, data []byte) []byte {
	enc, _ := coders()
	return enc.EncodeAll(data, dst[:0])
}

// Decode decompresses a stored chunk into dst (its length is the
// chunk's) and checks it against sum; any mismatch is ErrCorrupt.
func Decode(dst, stored []byte, sum string) error {
	_, dec := coders()
	out, err := dec.DecodeAll(stored, dst[:0])
	if err != nil {
		return fmt.Errorf("%w: chunk %s: %v", ErrCorrupt, sum[:12], err)
	}
	if len(out) != len(dst) || &out[0] != &dst[0] {
		return fmt.Errorf("%w: chunk %s: %d bytes, want %d", ErrCorrupt, sum[:12], len(out), len(dst))
	}
	if SumHex(dst) != sum {
		return fmt.Errorf("%w: chunk %s: content does not match its digest", ErrCorrupt, sum[:12])
	}
	return nil
}

// SnapshotFiles lists the files of the snapshot in dir that are pushed:
// the manifest, device state, memory and strategy artifacts, skipping
// temporaries (dot files).
func SnapshotFiles(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type().IsRegular() {
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	sort.Strings(out)
	return out, err
}
