// Package archivetest builds gzipped tar archives for tests of code uploads.
package archivetest

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"testing"
	"time"
)

// Entry is one member of a test archive. Typeflag 0 means a regular file and
// Mode 0 means 0644. Size, when set, is written in the header instead of
// len(Body) and the body is left out: the archive then ends right after that
// header (enough for checks made on headers).
type Entry struct {
	Name     string
	Typeflag byte
	Body     string
	Mode     int64
	Link     string
	Size     int64
}

// TarGz returns the gzipped tar archive of entries, in order.
func TarGz(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	complete := true
	for _, e := range entries {
		h := &tar.Header{Name: e.Name, Typeflag: e.Typeflag, Mode: e.Mode, Linkname: e.Link, ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if e.Size != 0 {
			h.Size = e.Size
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if e.Size != 0 {
			complete = false
			break
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if complete {
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
