package fs

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Every object is reached from the root one directory at a time, each
// opened with O_NOFOLLOW relative to the one before: a symbolic link
// planted in the store (a segment of a key pointing at /etc, say) is
// refused, so no key reads, writes or deletes outside the root. The root
// itself may be a link (the operator's choice).

// errNoRoot: the store's directory does not exist.
var errNoRoot = errors.New("the store's directory does not exist")

// errSymlink: a key's path in the store crosses a symbolic link.
var errSymlink = errors.New("a symbolic link in the store (it follows none)")

// openParent opens the directory holding key's file, creating the
// directories on the way when create is set, and returns it with the
// file's name in it.
func (s *Store) openParent(key string, create bool) (*os.File, string, error) {
	segs := strings.Split(key, "/")
	d, err := os.Open(s.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil, "", errNoRoot
	}
	if err != nil {
		return nil, "", err
	}
	for _, seg := range segs[:len(segs)-1] {
		next, err := openDirAt(d, seg)
		if errors.Is(err, unix.ENOENT) && create {
			if err = unix.Mkdirat(int(d.Fd()), seg, DirMode); err == nil || errors.Is(err, unix.EEXIST) {
				next, err = openDirAt(d, seg)
			}
		}
		d.Close()
		if err != nil {
			return nil, "", err
		}
		d = next
	}
	return d, segs[len(segs)-1], nil
}

// openDirAt opens the directory name in d, refusing a link.
func openDirAt(d *os.File, name string) (*os.File, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, linkErr(d, name, err)
	}
	return os.NewFile(uintptr(fd), d.Name()+"/"+name), nil
}

// openObject opens the regular file name in d for reading, refusing a
// link and anything else that is not a regular file.
func openObject(d *os.File, name string) (*os.File, os.FileInfo, error) {
	fd, err := unix.Openat(int(d.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, linkErr(d, name, err)
	}
	f := os.NewFile(uintptr(fd), d.Name()+"/"+name)
	st, err := f.Stat()
	if err == nil && !st.Mode().IsRegular() {
		err = os.ErrNotExist // a directory (a prefix of other keys) is no object
	}
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, st, nil
}

// linkErr says that name in d is a link when opening it failed because
// of O_NOFOLLOW.
func linkErr(d *os.File, name string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		var st unix.Stat_t
		if unix.Fstatat(int(d.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("%s/%s: %w", d.Name(), name, errSymlink)
		}
	}
	return &os.PathError{Op: "open", Path: d.Name() + "/" + name, Err: err}
}
