package tcptest

import (
	"io"
	"net"
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
