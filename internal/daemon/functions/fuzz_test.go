package functions

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/thaw-dev/thaw/internal/errdefs"
)

func fuzzArchive(entries ...tar.Header) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, h := range entries {
		h := h
		body := bytes.Repeat([]byte("x"), int(h.Size))
		tw.WriteHeader(&h)
		tw.Write(body)
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// FuzzExtractArchive feeds arbitrary bytes as a function upload: extraction
// never panics, writes nothing outside its directory, and refuses what it
// refuses as invalid input.
func FuzzExtractArchive(f *testing.F) {
	f.Add(fuzzArchive(tar.Header{Name: "handler.py", Mode: 0o644, Size: 10, Typeflag: tar.TypeReg}))
	f.Add(fuzzArchive(tar.Header{Name: "../escape", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}))
	f.Add(fuzzArchive(tar.Header{Name: "lib/", Typeflag: tar.TypeDir, Mode: 0o755},
		tar.Header{Name: "lib/a.py", Mode: 0o600, Size: 3, Typeflag: tar.TypeReg}))
	f.Add(fuzzArchive(tar.Header{Name: "link", Linkname: "/etc/passwd", Typeflag: tar.TypeSymlink}))
	f.Add(fuzzArchive(tar.Header{Name: "/abs", Size: 1, Typeflag: tar.TypeReg}))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff})
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "code")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		err := extractArchive(dst, bytes.NewReader(data))
		if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Fatalf("extract: %v (not errdefs.ErrInvalid)", err)
		}
		ents, _ := os.ReadDir(parent)
		if len(ents) != 1 || ents[0].Name() != "code" {
			t.Fatalf("wrote outside its directory: %v", ents)
		}
		var n int
		filepath.WalkDir(dst, func(p string, d os.DirEntry, err error) error {
			if err == nil && p != dst {
				n++
				if d.Type()&os.ModeSymlink != 0 {
					t.Errorf("extracted a symlink %s", p)
				}
			}
			return nil
		})
		if n > MaxCodeEntries {
			t.Fatalf("%d entries extracted, over the limit", n)
		}
	})
}
