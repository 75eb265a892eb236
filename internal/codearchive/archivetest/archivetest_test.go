package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"
)

func readAll(t *testing.T, archive []byte) ([]*tar.Header, []string, error) {
	t.Helper()
	gz, err := gzip.NewReader(bytes.NewReader(archive))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var hs []*tar.Header
	var bodies []string
	for {
		h, err := tr.Next()
		if err != nil {
			return hs, bodies, err
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return hs, bodies, err
		}
		hs = append(hs, h)
		bodies = append(bodies, string(b))
	}
}

func TestTarGzDefaults(t *testing.T) {
	archive := TarGz(t,
		Entry{Name: "handler.py", Body: "x = 1\n"},
		Entry{Name: "lib/", Typeflag: tar.TypeDir, Mode: 0o700},
		Entry{Name: "link", Typeflag: tar.TypeSymlink, Link: "handler.py"})
	hs, bodies, err := readAll(t, archive)
	if !errors.Is(err, io.EOF) {
		t.Fatalf("archive ends with %v, want io.EOF", err)
	}
	if len(hs) != 3 {
		t.Fatalf("%d members, want 3", len(hs))
	}
	if hs[0].Typeflag != tar.TypeReg || hs[0].Mode != 0o644 || hs[0].Size != 6 || bodies[0] != "x = 1\n" {
		t.Errorf("file = %c %o %d %q", hs[0].Typeflag, hs[0].Mode, hs[0].Size, bodies[0])
	}
	if hs[1].Typeflag != tar.TypeDir || hs[1].Mode != 0o700 {
		t.Errorf("dir = %c %o", hs[1].Typeflag, hs[1].Mode)
	}
	if hs[2].Typeflag != tar.TypeSymlink || hs[2].Linkname != "handler.py" {
		t.Errorf("link = %c %q", hs[2].Typeflag, hs[2].Linkname)
	}
}

func TestTarGzSizeEndsAfterHeader(t *testing.T) {
	archive := TarGz(t,
		Entry{Name: "big", Size: 1 << 40},
		Entry{Name: "never written", Body: "x"})
	hs, _, err := readAll(t, archive)
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("archive ends with %v, want a truncated body", err)
	}
	if len(hs) != 0 {
		t.Fatalf("%d complete members, want 0", len(hs))
	}
}
