package memlayout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

const ps = int(PageSize)

// writeMem creates a synthetic memory file from spec, one character per
// page: 'D' random data (never an all-zero page), 'Z' zeros actually
// written, 'H' a hole (never written), 'E' zero but for its last byte,
// 'F' zero but for its first byte. tail > 0 cuts the last page to tail
// bytes (a partial last page). It returns the file's content.
func writeMem(t testing.TB, path string, seed uint64, spec string, tail int) []byte {
	t.Helper()
	var key [32]byte
	key[0], key[1] = byte(seed), byte(seed>>8)
	src := rand.NewChaCha8(key)
	rng := rand.New(src)
	size := len(spec) * ps
	if tail > 0 && len(spec) > 0 {
		size -= ps - tail
	}
	content := make([]byte, size)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, c := range spec {
		lo, hi := i*ps, min((i+1)*ps, size)
		page := content[lo:hi]
		switch c {
		case 'D':
			src.Read(page)
			page[rng.IntN(len(page))] |= 1
		case 'E':
			page[len(page)-1] = 0x80
		case 'F':
			page[0] = 0x01
		case 'Z', 'H':
		default:
			t.Fatalf("bad spec char %q", c)
		}
		if c == 'H' {
			continue
		}
		if _, err := f.WriteAt(page, int64(lo)); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(int64(size)); err != nil {
		t.Fatal(err)
	}
	return content
}

// randomSpec returns a spec of n pages with runs of each kind.
func randomSpec(rng *rand.Rand, n int) string {
	kinds := "DDDZHHEF"
	var b []byte
	for len(b) < n {
		k := kinds[rng.IntN(len(kinds))]
		run := 1 + rng.IntN(40)
		for i := 0; i < run && len(b) < n; i++ {
			b = append(b, k)
		}
	}
	return string(b)
}

// nonzeroOf is the reference ZeroScan over bytes.
func nonzeroOf(content []byte) []PageRun {
	var out []PageRun
	for p := 0; p*ps < len(content); p++ {
		page := content[p*ps : min((p+1)*ps, len(content))]
		if bytes.Count(page, []byte{0}) == len(page) {
			continue
		}
		if n := len(out); n > 0 && out[n-1].End() == uint64(p) {
			out[n-1].Pages++
		} else {
			out = append(out, PageRun{uint64(p), 1})
		}
	}
	return out
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// pageOf returns page p of content, padded with zeros to a whole page.
func pageOf(content []byte, p uint64) []byte {
	out := make([]byte, ps)
	lo := int(p) * ps
	if lo < len(content) {
		copy(out, content[lo:min(lo+ps, len(content))])
	}
	return out
}

// holesSupported reports whether the file system of dir reports holes.
func holesSupported(t testing.TB, dir string) bool {
	path := filepath.Join(dir, "holeprobe")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)
	defer f.Close()
	if _, err := f.WriteAt([]byte{1}, 1<<20); err != nil {
		t.Fatal(err)
	}
	off, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_DATA)
	return err == nil && off > 0 || errors.Is(err, unix.ENXIO)
}

func mustRead(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// DecodeFaaSnap parses and checks a faasnap.json: magic, version (newer is
// ErrIncompatible), page size, checksum, canonical encoding and structure
// (see validate). It does not look at any file. It enforces the invariants
// of FaaSnap §4.5–§4.7 (non-zero regions, loading regions in group order,
// contiguous loading-set file); the checking itself is thaw's, since the
// paper trusts its daemon's in-memory copy.
func DecodeFaaSnap(b []byte) (*FaaSnapArtifact, error) { return decodeManifest[FaaSnapArtifact](b) }

// DecodeREAP parses and checks a reap.json: magic, version (newer is
// ErrIncompatible), page size, checksum and structure (validate). It does
// not look at any file. (REAP trusts its own files; the checking is
// thaw's.)
func DecodeREAP(b []byte) (*REAPArtifact, error) { return decodeManifest[REAPArtifact](b) }

// DecodeSnapBPF parses and checks a snapbpf.json: magic, version (newer is
// ErrIncompatible), page size, checksum, canonical form, and structure
// (validate). It looks at no file. (SnapBPF keeps its map in the kernel;
// the checking is thaw's.)
func DecodeSnapBPF(b []byte) (*SnapBPFArtifact, error) { return decodeManifest[SnapBPFArtifact](b) }

// Resolve (FaaSnap Figure 4's semantics: "upper layers override the pages
// of lower layers") computes in pure Go the guest memory a layout table yields when
// the memory file holds memFile and the loading-set file lsFile: zeros, then
// each entry's bytes on top, in order, as the shim's MAP_FIXED mappings
// stack. A file-backed page at or past the end of its file (rounded up to a
// page) is an error: touching it would raise SIGBUS; the tail of a file's
// partial last page reads as zeros, as mmap does. It allocates the whole
// memory: it is the model half of the shim conformance tests, for small
// layouts.
func Resolve(layout, memFile, lsFile []byte) ([]byte, error) {
	return ResolveDevice(layout, memFile, lsFile, nil)
}

// ResolveDevice is Resolve with device entries reading device.
func ResolveDevice(layout, memFile, lsFile, device []byte) ([]byte, error) {
	t, err := DecodeShimLayout(layout)
	if err != nil {
		return nil, err
	}
	if t.MemSize > math.MaxInt {
		return nil, fmt.Errorf("memory of %d bytes is too large to resolve", t.MemSize)
	}
	out := make([]byte, t.MemSize)
	for i, e := range t.Entries {
		dst := out[e.GuestOff : e.GuestOff+e.Length]
		var src []byte
		switch e.Kind {
		case ShimAnonymous:
			clear(dst)
			continue
		case ShimMemoryFile:
			src = memFile
		case ShimLoadingSet:
			src = lsFile
		case ShimDevice:
			src = device
		}
		mapped := (uint64(len(src)) + PageSize - 1) / PageSize * PageSize
		if e.FileOff+e.Length > mapped {
			return nil, fmt.Errorf("layout entry %d maps file bytes [%d,%d) of a %d-byte file: SIGBUS", i, e.FileOff, e.FileOff+e.Length, len(src))
		}
		n := 0
		if e.FileOff < uint64(len(src)) {
			n = copy(dst, src[e.FileOff:])
		}
		clear(dst[n:])
	}
	return out, nil
}

// LoadingSet is the regions planLoadingSet plans, without its stats.
func LoadingSet(order []uint64, groupSize int, nonzero []PageRun, mergeGap uint64) []LSRegion {
	rs, _ := planLoadingSet(order, groupSize, nonzero, mergeGap)
	return rs
}
