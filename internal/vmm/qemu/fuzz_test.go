package qemu

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// FuzzQMPReply feeds whatever a compromised QEMU could write on its QMP
// socket to the client: it must never panic or hang, and a reply it
// accepts is one QEMU could have sent.
func FuzzQMPReply(f *testing.F) {
	for _, s := range []string{
		`{"return": {}}`,
		`{"return": {"status": "running"}, "id": 2}`,
		`{"error": {"class": "GenericError", "desc": "no"}, "id": 2}`,
		`{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}` + "\n" + `{"return": {"status": "paused"}, "id": 2}`,
		`{"return": {}, "id": 1}` + "\n" + `{"return": {"status": "running"}, "id": 2}`,
		`{"id": 2}`,
		`[]`,
		`{"return": `,
		"\x00\xff{\n",
		`{"return": {"status": 7}, "id": 2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if _, err := parseReply(data); err == nil && !bytes.Contains(data, []byte("{")) {
			t.Fatalf("accepted %q", data)
		}
		server, clientEnd := net.Pipe()
		go func() {
			defer server.Close()
			server.SetDeadline(time.Now().Add(2 * time.Second))
			buf := make([]byte, 4096)
			if _, err := server.Write([]byte(qmpGreeting + "\n")); err != nil {
				return
			}
			server.Read(buf) // qmp_capabilities
			if _, err := server.Write([]byte("{\"return\": {}, \"id\": 1}\n")); err != nil {
				return
			}
			server.Read(buf) // query-status
			server.Write(append(data, '\n'))
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		q, err := NewQMP(ctx, clientEnd)
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer q.Close()
		_, _ = q.RunState(ctx)
		if ctx.Err() != nil {
			t.Fatalf("client hung on %q", data)
		}
	})
}
