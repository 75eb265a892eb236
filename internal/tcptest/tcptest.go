// Package tcptest serves TCP on the host's loopback: the stand-in services
// that tests' guests, proxies and clients reach. Only tests import it.
package tcptest

import (
	"net"
	"strconv"
	"testing"
)

// FreeAddr is an address of 127.0.0.1 that nothing listens on now (another
// process may take it before the test binds it).
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// FreePort is the port of FreeAddr.
func FreePort(t testing.TB) int {
	t.Helper()
	_, port, err := net.SplitHostPort(FreeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Listen listens on a free port of 127.0.0.1 until the test ends.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// Serve listens on a free port of 127.0.0.1 until the test ends and hands
// each connection to handle, in a goroutine of its own, with its number (1
// for the first); it returns the address it listens on.
func Serve(t testing.TB, handle func(c net.Conn, n int)) *net.TCPAddr {
	t.Helper()
	ln := Listen(t)
	go func() {
		for n := 1; ; n++ {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c, n)
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}
