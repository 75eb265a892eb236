package memlayout

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
