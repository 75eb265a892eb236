package cluster

import (
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNamespace runs f on a thread switched into the named network
// namespace, so that the sockets f creates live there (they stay there
// after the thread switches back).
func inNamespace(name string, f func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("namespace %s: %w", name, err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("enter namespace %s: %w", name, err)
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		// The thread stays locked, so the runtime ends it with the
		// goroutine instead of reusing it in the wrong namespace.
		return errors.Join(ferr, fmt.Errorf("leave namespace %s: %w", name, err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// delayLine is the latency half of the emulated link: a TCP relay inside
// the store's namespace, listening on the store's address, that delivers
// every byte to MinIO (on the namespace's loopback) and every byte back
// half a round trip after it arrived, without limiting throughput (bytes
// in flight are queued with their due time). This kernel has no netem;
// the rate half is tbf on the veth. Connection set-up itself is not
// delayed (the kernel answers the handshake), which S3 clients, keeping
// their connections open, rarely pay.
type delayLine struct {
	ln       net.Listener
	ns       string
	upstream string
	oneWay   time.Duration
	mu       sync.Mutex
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func startDelayLine(ns, listen, upstream string, oneWay time.Duration) (*delayLine, error) {
	d := &delayLine{ns: ns, upstream: upstream, oneWay: oneWay, conns: map[net.Conn]struct{}{}}
	err := inNamespace(ns, func() error {
		var err error
		d.ln, err = net.Listen("tcp4", listen)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("link delay on %s: %w", listen, err)
	}
	d.wg.Add(1)
	go d.serve()
	return d, nil
}

func (d *delayLine) serve() {
	defer d.wg.Done()
	for {
		c, err := d.ln.Accept()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			d.relay(c)
		}()
	}
}

// track adds (or with add false removes) a connection Close must cut.
func (d *delayLine) track(c net.Conn, add bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if add {
		d.conns[c] = struct{}{}
	} else {
		delete(d.conns, c)
	}
}

func (d *delayLine) relay(c net.Conn) {
	var up net.Conn
	err := inNamespace(d.ns, func() error {
		var err error
		up, err = net.DialTimeout("tcp4", d.upstream, 2*time.Second)
		return err
	})
	if err != nil { // MinIO is down: the client sees the connection close
		c.Close()
		return
	}
	d.track(c, true)
	d.track(up, true)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); delayCopy(up, c, d.oneWay) }()
	go func() { defer wg.Done(); delayCopy(c, up, d.oneWay) }()
	wg.Wait()
	c.Close()
	up.Close()
	d.track(c, false)
	d.track(up, false)
}

type delayed struct {
	b   []byte
	due time.Time
}

// delayCopy copies src to dst, each read delivered delay after it
// arrived; at src's end it closes dst's write side.
func delayCopy(dst, src net.Conn, delay time.Duration) {
	q := make(chan delayed, 512) // 16 MiB in flight at most: then TCP's window closes
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- delayed{b[:n], time.Now().Add(delay)}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for p := range q {
		if failed {
			continue // drain so the reader ends
		}
		if w := time.Until(p.due); w > 0 {
			preciseSleep(w)
		}
		if _, err := dst.Write(p.b); err != nil {
			failed = true
			src.Close()
		}
	}
	if tc, ok := dst.(interface{ CloseWrite() error }); ok && !failed {
		_ = tc.CloseWrite()
	} else {
		dst.Close()
	}
}

// preciseSleep sleeps d with nanosleep(2) on this thread: the runtime's
// timers wake sub-millisecond sleeps up to a millisecond late, which
// would double the emulated 1 ms round trip.
func preciseSleep(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for {
		err := unix.Nanosleep(&ts, &ts)
		if err != unix.EINTR {
			return
		}
	}
}

// Close stops listening, cuts every relayed connection and waits for the
// relays to end.
func (d *delayLine) Close() error {
	err := d.ln.Close()
	d.mu.Lock()
	for c := range d.conns {
		c.Close()
	}
	d.mu.Unlock()
	d.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

var _ io.Closer = (*delayLine)(nil)
