// Package atomicfile replaces small files whole: a reader sees the old
// content or the new, never a part, and a crash leaves one of the two.
package atomicfile

import (
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, mode 0600: a temporary file beside it
// (".<name>.tmp-*", created exclusively, so never through a link), synced,
// renamed over path, the directory synced. On failure path is unchanged
// and the temporary file is gone.
func WriteFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = f.Chmod(0o600)
	if err != nil {
		f.Close()
	} else {
		err = WriteClose(f, data)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return Sync(filepath.Dir(path))
}

// WriteClose writes data to f, fsyncs and closes it: the first error, and
// f closed whatever fails.
func WriteClose(f *os.File, data []byte) error {
	_, err := f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Sync opens path, a file or a directory, and fsyncs it: for a directory,
// a rename or create in it is then durable.
func Sync(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}
