package uffd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Handshake message sent by the shim (docs/shim-layout.md, "uffd mode"),
// 32 bytes little-endian: magic[8] "THAWUFD1", u64 addr, u64 length,
// u32 page_size, u32 pid; the userfaultfd travels as SCM_RIGHTS.
const (
	handshakeMagic = "THAWUFD1"
	handshakeSize  = 32
	ackByte        = 1
)

// HandshakeTimeout bounds how long Accept waits for the shim's message once a
// connection is accepted (the shim sends it right after connect).
const HandshakeTimeout = 10 * time.Second

// ErrHandshake is wrapped by every error Accept returns for a connection
// whose message is malformed; the connection is closed (so the shim, which
// waits for the ack, fails at once) and the listener stays usable.
var ErrHandshake = errors.New("uffd: bad handshake")

// Listener accepts shim connections on a Unix stream socket.
type Listener struct {
	path string
	ln   *net.UnixListener
	mu   sync.Mutex // serializes Accept (it uses the listener's deadline)
}

// Listen listens on the Unix socket path (mode 0600). A stale socket left at
// path by a previous daemon is removed; any other existing file is an error.
func Listen(path string) (*Listener, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err == nil {
		if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
			return nil, fmt.Errorf("uffd: listen %s: exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("uffd: listen %s: socket in use", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("uffd: remove stale socket: %w", err)
		}
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("uffd: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("uffd: %w", err)
	}
	return &Listener{path: path, ln: ln}, nil
}

// Path returns the socket path.
func (l *Listener) Path() string { return l.path }

// Close stops listening and removes the socket file.
func (l *Listener) Close() error { return l.ln.Close() }

// Accept waits for one shim connection and receives its handshake and
// userfaultfd. It returns ctx.Err() when ctx ends first, and an error
// wrapping ErrHandshake for a malformed message (that connection is closed;
// call Accept again for the next one). The caller owns the Mapping: Ack it
// once it is ready (after Prefetch) and Close it when the VM is gone.
func (l *Listener) Accept(ctx context.Context) (*Mapping, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fired := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		l.ln.SetDeadline(time.Unix(1, 0))
		close(fired)
	})
	conn, err := l.ln.AcceptUnix()
	if !stop() {
		// ctx ended while accepting: wait until the deadline is in the
		// past, then clear it for the next Accept.
		<-fired
		l.ln.SetDeadline(time.Time{})
		if conn != nil {
			conn.Close()
		}
		return nil, ctx.Err()
	}
	if err != nil {
		return nil, fmt.Errorf("uffd: accept: %w", err)
	}
	r, err := receive(ctx, conn)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return r, nil
}

// Mapping is one guest memory mapping registered with a userfaultfd by the
// shim.
type Mapping struct {
	Addr   uint64 // start of the mapping in the faulting process
	Length uint64 // bytes, a multiple of PageSize
	PID    int    // pid of the faulting process as it reported it
	FD     int    // the userfaultfd (O_NONBLOCK, close-on-exec in this process)

	// PeerPID is the connecting process's pid from SO_PEERCRED (0 when
	// unknown); it is what the server watches to notice the process's exit.
	PeerPID int

	conn   *net.UnixConn
	mu     sync.Mutex
	closed bool
}

// Ack sends the 1-byte ack the shim waits for and closes the connection: the
// faulting process continues (its vCPUs start running) after it.
func (r *Mapping) Ack() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn == nil {
		return errors.New("uffd: ack: no connection (already acked or not from Accept)")
	}
	r.conn.SetWriteDeadline(time.Now().Add(HandshakeTimeout))
	_, err := r.conn.Write([]byte{ackByte})
	cerr := r.conn.Close()
	r.conn = nil
	if err != nil {
		return fmt.Errorf("uffd: ack: %w", err)
	}
	if cerr != nil {
		return fmt.Errorf("uffd: ack: %w", cerr)
	}
	return nil
}

// Close closes the userfaultfd and, if it was never acked, the connection.
// Closing the userfaultfd wakes every thread blocked in a fault on the
// region; they then fault as on ordinary anonymous memory. Stop the Server
// first.
func (r *Mapping) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	var err error
	if r.conn != nil {
		r.conn.Close()
		r.conn = nil
	}
	if r.FD >= 0 {
		err = unix.Close(r.FD)
		r.FD = -1
	}
	return err
}

// Pages returns the number of pages in the region.
func (r *Mapping) Pages() uint64 { return r.Length / PageSize }

func (r *Mapping) String() string {
	return fmt.Sprintf("uffd region %#x+%#x pid %d fd %d", r.Addr, r.Length, r.PID, r.FD)
}

// receive reads the 32-byte handshake and the attached fd from conn.
func receive(ctx context.Context, conn *net.UnixConn) (*Mapping, error) {
	deadline := time.Now().Add(HandshakeTimeout)
	ctxDeadline := false
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline, ctxDeadline = d, true
	}
	conn.SetReadDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()

	rc, err := conn.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("uffd: %w", err)
	}
	var h handshakeRead
	for h.got < handshakeSize && h.err == nil {
		if err := rc.Read(h.recv); err != nil && h.err == nil {
			h.err = err
		}
	}
	if h.err != nil {
		h.closeFDs()
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case ctxDeadline && errors.Is(h.err, os.ErrDeadlineExceeded):
			// ctx's deadline, reached before its own timer fired.
			return nil, context.DeadlineExceeded
		case errors.Is(h.err, ErrHandshake):
			return nil, h.err
		}
		return nil, fmt.Errorf("%w: receive: %v", ErrHandshake, h.err)
	}
	r, err := parseHandshake(h.msg[:], h.fds)
	if err != nil {
		h.closeFDs()
		return nil, err
	}
	if cred, err := peerCred(rc); err == nil {
		r.PeerPID = int(cred.Pid)
	}
	r.conn = conn
	return r, nil
}

// handshakeRead gathers the handshake message and the descriptors sent
// with it, over as many reads as it takes.
type handshakeRead struct {
	msg [handshakeSize]byte
	got int
	fds []int
	err error
	oob [64]byte // room for a few fds, to close extras
}

// recv is one non-blocking recvmsg (a syscall.RawConn Read callback).
func (h *handshakeRead) recv(fd uintptr) bool {
	oob := h.oob[:unix.CmsgSpace(4*4)]
	n, oobn, flags, _, e := unix.Recvmsg(int(fd), h.msg[h.got:], oob, unix.MSG_CMSG_CLOEXEC)
	for e == unix.EINTR {
		n, oobn, flags, _, e = unix.Recvmsg(int(fd), h.msg[h.got:], oob, unix.MSG_CMSG_CLOEXEC)
	}
	if e == unix.EAGAIN {
		return false
	}
	if e != nil {
		h.err = e
		return true
	}
	if oobn > 0 {
		cms, perr := unix.ParseSocketControlMessage(oob[:oobn])
		if perr != nil {
			h.err = perr
		}
		for i := range cms {
			if f, perr := unix.ParseUnixRights(&cms[i]); perr == nil {
				h.fds = append(h.fds, f...)
			}
		}
	}
	if flags&unix.MSG_CTRUNC != 0 && h.err == nil {
		h.err = fmt.Errorf("%w: control message truncated", ErrHandshake)
	}
	if n == 0 {
		if h.err == nil {
			h.err = io.ErrUnexpectedEOF
		}
		return true
	}
	h.got += n
	return true
}

func (h *handshakeRead) closeFDs() {
	for _, f := range h.fds {
		unix.Close(f)
	}
}

func parseHandshake(msg []byte, fds []int) (*Mapping, error) {
	if len(msg) != handshakeSize {
		return nil, fmt.Errorf("%w: message is %d bytes, want %d", ErrHandshake, len(msg), handshakeSize)
	}
	if !bytes.Equal(msg[:8], []byte(handshakeMagic)) {
		return nil, fmt.Errorf("%w: magic %q, want %q", ErrHandshake, msg[:8], handshakeMagic)
	}
	addr := binary.LittleEndian.Uint64(msg[8:])
	length := binary.LittleEndian.Uint64(msg[16:])
	pageSize := binary.LittleEndian.Uint32(msg[24:])
	pid := binary.LittleEndian.Uint32(msg[28:])
	switch {
	case pageSize != PageSize:
		return nil, fmt.Errorf("%w: page size %d, want %d", ErrHandshake, pageSize, PageSize)
	case length == 0 || length%PageSize != 0:
		return nil, fmt.Errorf("%w: length %d is not a positive multiple of %d", ErrHandshake, length, PageSize)
	case addr == 0 || addr%PageSize != 0:
		return nil, fmt.Errorf("%w: address %#x is not page-aligned", ErrHandshake, addr)
	case addr+length < addr:
		return nil, fmt.Errorf("%w: range %#x+%#x overflows", ErrHandshake, addr, length)
	case len(fds) != 1:
		return nil, fmt.Errorf("%w: got %d file descriptors, want 1", ErrHandshake, len(fds))
	}
	if !isUserfaultfd(fds[0]) {
		return nil, fmt.Errorf("%w: descriptor is not a userfaultfd", ErrHandshake)
	}
	return &Mapping{Addr: addr, Length: length, PID: int(pid), FD: fds[0]}, nil
}

// isUserfaultfd reports whether fd is an anon inode of class userfaultfd.
func isUserfaultfd(fd int) bool {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return err == nil && link == "anon_inode:[userfaultfd]"
}

func peerCred(rc interface {
	Control(func(fd uintptr)) error
}) (*unix.Ucred, error) {
	var (
		cred *unix.Ucred
		cerr error
	)
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}
