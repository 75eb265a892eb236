package qemu

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// launch is everything QEMU inherits, opened by the daemon: QEMU itself may
// run as a user that can open none of thaw's files.
type launch struct {
	fds   Descriptors
	files []*os.File // the child's descriptors 3, 4, ...
	owned []bool     // files[i] was opened here (closed after the start)
	env   []string
	table int // THAW_SHIM_FD_<n> entries so far

	qmp, agent net.Conn // the daemon's ends
	console    *os.File
}

// pass adds f to the child's descriptors and returns its number there.
func (l *launch) pass(f *os.File, owned bool) int {
	l.files = append(l.files, f)
	l.owned = append(l.owned, owned)
	return 2 + len(l.files)
}

// announce passes f and lists it in the interposer's file table under path.
func (l *launch) announce(path string, f *os.File) {
	fd := l.pass(f, true)
	l.env = append(l.env, fmt.Sprintf("THAW_SHIM_FD_%d=%d:%s", l.table, fd, path))
	l.table++
}

// open opens path for the child and announces it.
func (l *launch) open(path string, flag int, perm os.FileMode) error {
	if !filepath.IsAbs(path) {
		return fmt.Errorf("%s: the interposer's file table takes absolute paths", path)
	}
	f, err := os.OpenFile(path, flag|syscall.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	l.announce(path, f)
	return nil
}

// closeChildEnds drops the daemon's copies of what the child inherited.
func (l *launch) closeChildEnds() {
	for i, f := range l.files {
		if l.owned[i] {
			f.Close()
		}
	}
	l.files = nil
}

// closeAll undoes prepare.
func (l *launch) closeAll() {
	l.closeChildEnds()
	for _, c := range []io.Closer{l.qmp, l.agent} {
		if c != nil {
			c.Close()
		}
	}
	if l.console != nil {
		l.console.Close()
	}
}

// socketPair returns a connected stream pair: the daemon's end as a
// net.Conn (or file) and the child's end as a file.
func socketPair(name string) (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("%s socket pair: %w", name, err)
	}
	return os.NewFile(uintptr(fds[0]), name), os.NewFile(uintptr(fds[1]), name+"-qemu"), nil
}

func fileConn(f *os.File) (net.Conn, error) {
	defer f.Close()
	return net.FileConn(f)
}

// prepare opens every descriptor QEMU will inherit, the interposer shimPath
// first, and builds its clean environment. On error the caller calls
// closeAll.
func prepare(spec *vmm.Spec, shimPath string) (*launch, error) {
	l := &launch{env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
	shim, err := os.Open(shimPath)
	if err != nil {
		return l, fmt.Errorf("interposer: %w", err)
	}
	// Through /proc/self/fd the loader reaches the library whatever the
	// directories above it allow QEMU's user.
	l.env = append(l.env, fmt.Sprintf("LD_PRELOAD=/proc/self/fd/%d", l.pass(shim, true)))

	for _, c := range []struct {
		name string
		conn *net.Conn
		fd   *int
	}{{"qmp", &l.qmp, &l.fds.QMP}, {"agent", &l.agent, &l.fds.Agent}} {
		mine, theirs, err := socketPair(c.name)
		if err != nil {
			return l, err
		}
		*c.fd = l.pass(theirs, true)
		if *c.conn, err = fileConn(mine); err != nil {
			return l, fmt.Errorf("%s socket: %w", c.name, err)
		}
	}
	mine, theirs, err := socketPair("console")
	if err != nil {
		return l, err
	}
	l.console, l.fds.Console = mine, l.pass(theirs, true)

	for _, d := range spec.Disks {
		flag := os.O_RDWR
		if d.ReadOnly {
			flag = os.O_RDONLY
		}
		f, err := os.OpenFile(d.Path, flag|syscall.O_CLOEXEC, 0)
		if err != nil {
			return l, fmt.Errorf("disk: %w", err)
		}
		l.fds.Disks = append(l.fds.Disks, l.pass(f, true))
	}
	if spec.Tap != nil {
		l.fds.Tap = l.pass(spec.Tap, false)
	}
	for _, p := range []string{spec.Kernel, spec.Initrd} {
		if err := l.open(p, os.O_RDONLY, 0); err != nil {
			return l, fmt.Errorf("guest image: %w", err)
		}
	}
	if spec.Accel == vmm.AccelKVM {
		if err := l.open("/dev/kvm", os.O_RDWR, 0); err != nil {
			return l, err
		}
	}
	// A booting VM's RAM file is created here, private to the daemon; a
	// restored VM maps its snapshot's file private, so QEMU gets it read-only.
	memFlag, memPerm := os.O_RDONLY, os.FileMode(0)
	if spec.Memory.Shared {
		memFlag, memPerm = os.O_RDWR|os.O_CREATE, 0o600
	}
	if err := l.open(spec.Memory.Path, memFlag, memPerm); err != nil {
		return l, fmt.Errorf("guest memory: %w", err)
	}
	c, err := interposerFor(spec.Memory, spec.RunDir)
	if err != nil {
		return l, err
	}
	if err := l.interposer(c); err != nil {
		return l, err
	}
	return l, nil
}

// interposer adds the strategy's interposer settings to the environment
// and opens the files and sockets they name.
func (l *launch) interposer(c interposer) error {
	l.env = append(l.env, c.env()...)
	for _, f := range []struct {
		name, path string
		flag       int
	}{
		{"layout table", c.Layout, os.O_RDONLY},
		{"loading-set file", c.LSFile, os.O_RDONLY},
		{"device", c.Device, os.O_RDWR},
		{"stats file", c.Stats, os.O_WRONLY | os.O_CREATE | os.O_TRUNC},
	} {
		if f.path == "" {
			continue
		}
		if err := l.open(f.path, f.flag, 0o600); err != nil {
			return fmt.Errorf("interposer %s: %w", f.name, err)
		}
	}
	if c.UffdSock != "" {
		conn, err := net.Dial("unix", c.UffdSock)
		if err != nil {
			return fmt.Errorf("userfaultfd socket: %w", err)
		}
		f, err := conn.(*net.UnixConn).File()
		conn.Close()
		if err != nil {
			return fmt.Errorf("userfaultfd socket: %w", err)
		}
		l.announce(c.UffdSock, f)
	}
	if c.Mode == modeUffd {
		// Opened by the daemon, /dev/userfaultfd lets an unprivileged
		// QEMU create a userfaultfd (Linux 6.1+).
		if err := l.open("/dev/userfaultfd", os.O_RDWR, 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("userfaultfd device: %w", err)
		}
	}
	return nil
}
