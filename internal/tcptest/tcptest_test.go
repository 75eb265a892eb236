package tcptest

import (
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// Every connection reaches handle, numbered in the order accepted, and the
// listener is gone once the test that made it has ended.
func TestServe(t *testing.T) {
	var addr *net.TCPAddr
	t.Run("serve", func(t *testing.T) {
		nums := make(chan int, 2)
		addr = Serve(t, func(c net.Conn, n int) {
			defer c.Close()
			nums <- n
			io.Copy(c, c)
		})
		if !addr.IP.IsLoopback() || addr.Port == 0 {
			t.Fatalf("address %v, want a port on loopback", addr)
		}
		for want := 1; want <= 2; want++ {
			c, err := net.DialTimeout("tcp4", addr.String(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(5 * time.Second))
			if _, err := c.Write([]byte("ping")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 4)
			if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
				t.Fatalf("echo %q %v", buf, err)
			}
			if n := <-nums; n != want {
				t.Fatalf("connection %d handed over as %d", want, n)
			}
			c.Close()
		}
	})
	if c, err := net.DialTimeout("tcp4", addr.String(), time.Second); err == nil {
		c.Close()
		t.Fatalf("%v still accepts after its test ended", addr)
	}
}

// FreeAddr names a port of 127.0.0.1 that can be listened on at once.
func TestFreeAddr(t *testing.T) {
	addr := FreeAddr(t)
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	defer ln.Close()
	if a := ln.Addr().(*net.TCPAddr); !a.IP.IsLoopback() || a.Port == 0 {
		t.Fatalf("address %v, want a port on loopback", a)
	}
}

// Listen's listener accepts on loopback while the test runs and is closed
// once it ends; FreePort is a port nothing listens on, free to bind.
func TestListenAndFreePort(t *testing.T) {
	var addr string
	t.Run("listen", func(t *testing.T) {
		ln := Listen(t)
		addr = ln.Addr().String()
		c, err := net.DialTimeout("tcp4", addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
	})
	if c, err := net.DialTimeout("tcp4", addr, time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts after the test ended", addr)
	}
	port := FreePort(t)
	if port <= 0 {
		t.Fatalf("FreePort = %d", port)
	}
	ln, err := net.Listen("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("bind the free port %d: %v", port, err)
	}
	ln.Close()
}
