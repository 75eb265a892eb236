package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/jsonscan"
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
		c := NewConn(guestAnswering(t, data))
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

// FuzzInvokeReply feeds a hostile guest's answer to an invocation, with
// the limits made small so that they are reached: every call ends within
// its deadline, and a reply it accepts was one JSON object whose "result"
// member is the Result, byte for byte.
func FuzzInvokeReply(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","ok":true,"result":{"a":[1,2,{"b":null}]},"duration_ms":1.5}`,
		`{"id":"1","ok":true,"duration_ms":1.5,"result":"` + strings.Repeat("x", 40) + `"}`,
		`{"id":"2","ok":true,"result":1}` + "\n" + `{"id":"1","ok":true,"result":[true]}`,
		`{"id":"1","ok":false,"error":{"type":"E","message":"m"}}`,
		`{"id":"1","result":1,"result":2}`,
		"{\"id\":\"1\",\"ok\":true,\"result\":\"\xe9\"}",
		` {"\u0069d" : "1" , "ok":true, "result" : -0.5e3 } `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewConn(guestAnswering(t, data))
		c.maxResult, c.maxEnvelope = 64, 128
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		r, err := c.call(ctx, map[string]any{"op": "invoke"})
		if ctx.Err() != nil {
			t.Fatalf("hung on %q", data)
		}
		if err != nil {
			return
		}
		if r.ID != "1" {
			t.Fatalf("accepted %+v from %q", r, data)
		}
		var line []byte // the first with id 1, as the Reply decodes ids
		for _, l := range bytes.Split(data, []byte("\n")) {
			var r struct{ ID string }
			if json.Unmarshal(l, &r) == nil && r.ID == "1" {
				line = l
				break
			}
		}
		var members map[string]json.RawMessage
		if !jsonscan.Valid(line) || json.Unmarshal(line, &members) != nil {
			t.Fatalf("accepted %q, which is not one JSON object", line)
		}
		if raw, ok := members["result"]; !bytes.Equal(r.Result, raw) || ok != (r.Result != nil) {
			t.Fatalf("result %q, the object's result member %q", r.Result, raw)
		}
	})
}

// guestAnswering is the host end of a pipe whose guest end reads one
// request and writes data and a newline back; closed when the test ends.
func guestAnswering(t *testing.T, data []byte) net.Conn {
	host, guest := net.Pipe()
	t.Cleanup(func() { host.Close() })
	go func() {
		defer guest.Close()
		guest.SetDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 4096)
		guest.Read(buf) // the request
		guest.Write(append(data, '\n'))
	}()
	return host
}
