// Package privfile reads and creates the files only the daemon's user may
// read or change: its keys and its API token. Such a file is a regular
// file, not a symbolic link, owned by the process's user, with no group or
// other permission bits; one that is not is refused, never trusted.
package privfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/thaw-dev/thaw/internal/atomicfile"
)

// ErrUnsafe is a file that is not private: a symbolic link, not a regular
// file, accessible to group or others, or owned by another user. Its
// message is the path and the problem, with the fix.
var ErrUnsafe = errors.New("file is not private")

type unsafeError struct{ msg string }

func (e *unsafeError) Error() string        { return e.msg }
func (e *unsafeError) Is(target error) bool { return target == ErrUnsafe }

func unsafe(format string, a ...any) error { return &unsafeError{fmt.Sprintf(format, a...)} }

// Read returns at most limit bytes of the private file at path: ErrUnsafe
// if it is not private; else the error of the open or read (fs.ErrNotExist,
// ...), which names path.
func Read(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, unsafe("%s is a symbolic link; give the file itself", path)
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat() // the file opened, not the name
	if err != nil {
		return nil, err
	}
	switch st, ok := fi.Sys().(*syscall.Stat_t); {
	case !fi.Mode().IsRegular():
		return nil, unsafe("%s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, unsafe("%s is accessible to group or others (mode %04o): chmod 600 it, and treat what it holds as disclosed",
			path, fi.Mode().Perm())
	case ok && int(st.Uid) != os.Geteuid():
		return nil, unsafe("%s is owned by uid %d, not by the daemon's user (%d)", path, st.Uid, os.Geteuid())
	}
	return io.ReadAll(io.LimitReader(f, limit))
}

// Create makes the private file path (mode 0600, never through a link)
// holding data, synced: fs.ErrExist if path names anything already. On
// failure nothing is left at path.
func Create(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	if err = atomicfile.WriteClose(f, data); err != nil {
		_ = os.Remove(path)
	}
	return err
}
