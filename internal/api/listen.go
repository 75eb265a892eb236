package api

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Addr is one address the API is served on: a Unix socket or TCP.
type Addr struct {
	Network string // "unix" or "tcp"
	Address string // socket path, or host:port
}

func (a Addr) String() string {
	if a.Network == "unix" {
		return "unix:" + a.Address
	}
	return a.Address
}

// ParseAddr reads a --listen value: an absolute path or unix:PATH is a Unix
// socket, anything else host:port.
func ParseAddr(s string) (Addr, error) {
	if p, ok := strings.CutPrefix(s, "unix:"); ok || filepath.IsAbs(s) {
		if !ok {
			p = s
		}
		if !filepath.IsAbs(p) {
			return Addr{}, fmt.Errorf("listen %q: a Unix socket needs an absolute path", s)
		}
		return Addr{Network: "unix", Address: filepath.Clean(p)}, nil
	}
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return Addr{}, fmt.Errorf("listen %q: want host:port, an absolute socket path or unix:PATH: %w", s, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return Addr{}, fmt.Errorf("listen %q: port %q is not a number from 0 to 65535", s, port)
	}
	return Addr{Network: "tcp", Address: s}, nil
}

// Loopback reports whether a TCP address is only reachable from this host:
// localhost or a loopback IP. An empty host (every interface) is not.
func (a Addr) Loopback() bool {
	host, _, err := net.SplitHostPort(a.Address)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// LoadTLS loads a certificate and its key for the TCP listeners.
func LoadTLS(certFile, keyFile string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s and key %s: %w", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// maxSocketPath is the room for a path in struct sockaddr_un.
const maxSocketPath = 107

// ListenUnix creates the API's Unix socket at path, mode 0660 and group
// gid whatever the umask. The parent directory is created (0755) if
// missing and must be owned by root (or the daemon's own user) and not
// writable by group or others, so nobody else can replace the socket. A
// stale socket is replaced; a live one (another daemon answers) or any
// other file is refused. The socket is bound inside a private (0700)
// directory, given its owner and mode there, and only then renamed into
// place, so no one can connect while it is still open to all.
func ListenUnix(path string, gid int) (net.Listener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("socket %s: path longer than %d bytes", path, maxSocketPath)
	}
	parent := filepath.Dir(path)
	if err := checkSocketDir(parent); err != nil {
		return nil, err
	}
	if err := checkStaleSocket(path); err != nil {
		return nil, err
	}
	tmpDir, err := os.MkdirTemp(parent, ".thawd-")
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	if len(tmp) > maxSocketPath {
		return nil, fmt.Errorf("socket %s: its directory's path is too long to bind in (%s)", path, tmp)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	if err := placeSocket(tmp, path, gid); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	st, err := os.Lstat(path)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return &unixListener{UnixListener: ln, path: path, st: st}, nil
}

func placeSocket(tmp, path string, gid int) error {
	if err := os.Chown(tmp, -1, gid); err != nil {
		return fmt.Errorf("group %d: %w", gid, err)
	}
	if err := os.Chmod(tmp, 0o660); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// checkSocketDir creates dir (0755) if missing and refuses one that others
// could write to.
func checkSocketDir(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
		if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
			return fmt.Errorf("socket directory %s: %w", dir, err)
		}
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("socket directory %s: %w", dir, err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || !ok {
		return fmt.Errorf("socket directory %s is not a directory", dir)
	}
	if st.Uid != 0 && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("socket directory %s is owned by uid %d, not by root: its owner could replace the socket", dir, st.Uid)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("socket directory %s is writable by group or others (mode %04o): they could replace the socket; use a directory such as /run/thaw (0755)", dir, fi.Mode().Perm())
	}
	return nil
}

// checkStaleSocket accepts a missing path or a socket nobody answers on.
func checkStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("socket %s: a %s is in the way; remove it or choose another path", path, fileKind(fi.Mode()))
	}
	if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another daemon is listening on it", path)
	}
	return nil
}

func fileKind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "regular file"
	case m.IsDir():
		return "directory"
	case m&fs.ModeSymlink != 0:
		return "symbolic link"
	}
	return "non-socket file (" + m.Type().String() + ")"
}

// unixListener removes its socket when closed, unless another daemon has
// replaced it since.
type unixListener struct {
	*net.UnixListener
	path string
	st   fs.FileInfo
}

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if st, serr := os.Lstat(l.path); serr == nil && os.SameFile(st, l.st) {
		_ = os.Remove(l.path)
	}
	return err
}

// Addr reports the socket's final path (the listener was bound elsewhere).
func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }
