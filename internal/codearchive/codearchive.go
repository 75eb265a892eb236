// Package codearchive packs a function's code directory as the tar.gz that
// POST /v1/functions takes and the registry stores under code/.
package codearchive

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"io/fs"
	"os"
)

// Pack packs dir's regular files and directories, in lexical order, with
// their permission bits and nothing else (no owners, no times), so the same
// code packs to the same bytes. Python's __pycache__ and .git are left out;
// anything else that is not a file or a directory is an error. A dir named
// through a symlink packs the directory it names.
func Pack(dir string) ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	fsys := os.DirFS(dir)
	err := fs.WalkDir(fsys, ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil || rel == "." {
			return err
		}
		if d.IsDir() && (d.Name() == "__pycache__" || d.Name() == ".git") {
			return fs.SkipDir
		}
		if !d.IsDir() && !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file or directory", rel)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		h := &tar.Header{Name: rel, Mode: int64(info.Mode().Perm()), Typeflag: tar.TypeReg, Size: info.Size()}
		if d.IsDir() {
			h.Name, h.Typeflag, h.Size = rel+"/", tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil || d.IsDir() {
			return err
		}
		f, err := fsys.Open(rel)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = gz.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", dir, err)
	}
	return buf.Bytes(), nil
}
