package vmnet

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"
)

// MaxConns bounds the connections one VM may have open through its
// services at once; more are closed at once.
const MaxConns = 64

// dialTimeout bounds connecting to a service.
const dialTimeout = 5 * time.Second

// proxy serves one VM's allowed services: connections the guest opens to a
// listener in its namespace are joined to the service, dialed from the
// host's namespace.
type proxy struct {
	log   *slog.Logger
	vm    string
	mu    sync.Mutex
	conns map[net.Conn]bool
	lns   []net.Listener
	udp   net.PacketConn
	wg    sync.WaitGroup
	done  chan struct{}

	active            int // guest connections open
	accepted, refused int
}

func newProxy(log *slog.Logger, vm string) *proxy {
	return &proxy{log: log, vm: vm, conns: map[net.Conn]bool{}, done: make(chan struct{})}
}

// serve proxies connections accepted on ln (a socket in the VM's
// namespace) to target.
func (p *proxy) serve(f *os.File, target netip.AddrPort) error {
	ln, err := net.FileListener(f)
	if err != nil {
		return err
	}
	p.lns = append(p.lns, ln)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed
			}
			if !p.track(c) {
				c.Close()
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer p.untrack(c, true)
				p.join(c, target)
			}()
		}
	}()
	return nil
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return false
	default:
	}
	if p.active >= MaxConns {
		p.refused++
		return false
	}
	p.accepted++
	p.active++
	p.conns[c] = true
	return true
}

// untrack forgets and closes c (guest: a guest connection, which counts
// towards MaxConns).
func (p *proxy) untrack(c net.Conn, guest bool) {
	p.mu.Lock()
	delete(p.conns, c)
	if guest {
		p.active--
	}
	p.mu.Unlock()
	c.Close()
}

// join copies both ways until both sides have finished, passing half
// closes on so request/response protocols see the end of a request.
func (p *proxy) join(guest net.Conn, target netip.AddrPort) {
	ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
	svc, err := (&net.Dialer{}).DialContext(ctx, "tcp4", target.String())
	cancel()
	if err != nil {
		p.log.Debug("allowed service unreachable", "vm", p.vm, "service", target, "err", err)
		return
	}
	p.mu.Lock()
	select {
	case <-p.done: // closed while dialing: close has cut the others already
		p.mu.Unlock()
		svc.Close()
		return
	default:
	}
	p.conns[svc] = true
	p.mu.Unlock()
	defer p.untrack(svc, false)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}
	go pipe(svc, guest)
	go pipe(guest, svc)
	wg.Wait()
}

// relayDNS answers the guest's DNS queries on f by asking the host's
// resolvers, for full-egress guests.
func (p *proxy) relayDNS(f *os.File, resolvers []netip.AddrPort) error {
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return err
	}
	p.udp = pc
	sem := make(chan struct{}, 16)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := append([]byte(nil), buf[:n]...)
			select {
			case sem <- struct{}{}:
			default:
				continue // too many queries in flight: drop, the guest retries
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				defer func() { <-sem }()
				if a := ask(q, resolvers); a != nil {
					_, _ = pc.WriteTo(a, from)
				}
			}()
		}
	}()
	return nil
}

// ask sends a DNS query to each resolver in turn and returns the first answer.
func ask(q []byte, resolvers []netip.AddrPort) []byte {
	for _, r := range resolvers {
		c, err := net.Dial("udp4", r.String())
		if err != nil {
			continue
		}
		_ = c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Write(q); err == nil {
			b := make([]byte, 4096)
			if n, err := c.Read(b); err == nil {
				c.Close()
				return b[:n]
			}
		}
		c.Close()
	}
	return nil
}

// close stops listening, cuts every connection and waits for the copies.
func (p *proxy) close() {
	p.mu.Lock()
	select {
	case <-p.done:
		p.mu.Unlock()
		return
	default:
	}
	close(p.done)
	for _, ln := range p.lns {
		ln.Close()
	}
	if p.udp != nil {
		p.udp.Close()
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
