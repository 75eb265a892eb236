package agent

import (
	"context"
	"encoding/json"
	"net"
	"testing"
	"time"
)

// FuzzAgentReply feeds what a hostile guest could write on its agent
// channel to the host side: every call returns (a reply or an error)
// within its deadline, never panics, and a reply it accepts carries the
// id it asked for.
func FuzzAgentReply(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","ok":true,"op":"pong"}`,
		`{"event":"ready"}` + "\n" + `{"id":"1","ok":true}`,
		`{"id":"1","ok":false,"error":{"type":"E","message":"m","traceback":"t"}}`,
		`{"id":"1","ok":true,"result":{"a":[1,2,{"b":null}]},"duration_ms":1.5}`,
		`{"id":"1","ok":true,"clock_step_ms":1e308,"hook":{"ran":true,"error":{"type":"X"}}}`,
		`{"id":1,"ok":true}`,
		`{"id":"1","ok":"yes"}`,
		"\x00\xff\xfe",
		`{"id":"1"`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		host, guest := net.Pipe()
		defer host.Close()
		go func() {
			defer guest.Close()
			guest.SetDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 4096)
			guest.Read(buf) // the request
			guest.Write(append(data, '\n'))
		}()
		c := NewConn(host)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := c.Restore(ctx, make([]byte, 64))
		if ctx.Err() != nil {
			t.Fatalf("hung on %q", data)
		}
		if err == nil {
			if r == nil || r.ID != "1" || !r.OK {
				t.Fatalf("accepted %+v from %q", r, data)
			}
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("accepted reply does not encode: %v", err)
			}
		}
	})
}
