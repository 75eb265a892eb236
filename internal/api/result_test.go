package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/client"
	"github.com/thaw-dev/thaw/internal/agent"
	"github.com/thaw-dev/thaw/internal/daemon"
	"github.com/thaw-dev/thaw/internal/vmm/vmmtest"
)

// bigEvent asks the fake guest for a result of n bytes (with time to spare
// under the race detector).
func bigEvent(n int) string {
	return fmt.Sprintf(`{"event":{"op":"big","bytes":%d},"timeout_ms":120000}`, n)
}

// A result of 8 MiB reaches the caller byte for byte, in an answer that
// matches openapi.json and says its length; the history keeps its first
// bytes and its size. (The agent's tests read results of exactly
// MaxResult; e2e's TestLargeResult sends 30 MB through a real VM.)
func TestLargeResultAnswer(t *testing.T) {
	const n = 8 << 20
	srv, c, vm := bootedEcho(t)
	ctx := context.Background()
	resp, body := send(t, srv, "POST", "/v1/vms/"+vm.ID+"/invoke", bigEvent(n))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("status %d, Content-Length %q, body %d bytes", resp.StatusCode, resp.Header.Get("Content-Length"), len(body))
	}
	var inv struct {
		ID     string          `json:"id"`
		OK     bool            `json:"ok"`
		Result json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &inv); err != nil || !inv.OK {
		t.Fatalf("answer: %v, ok %v", err, inv.OK)
	}
	if want := vmmtest.BigResult(n); !bytes.Equal(inv.Result, want) {
		t.Fatalf("result is %d bytes, not the %d the guest sent", len(inv.Result), len(want))
	}
	recs, err := c.ListInvocations(ctx, "echo", 1)
	if err != nil || len(recs) != 1 || recs[0].ID != inv.ID {
		t.Fatalf("history: %v, %+v", err, recs)
	}
	d := recs[0].Detail
	if d.Result != nil || !d.ResultTruncated || d.ResultBytes != n || len(d.ResultPrefix) != daemon.DefaultMaxStoredResult ||
		!strings.HasPrefix(string(vmmtest.BigResult(n)), d.ResultPrefix) {
		t.Fatalf("history detail: truncated %v, %d bytes, prefix %d bytes", d.ResultTruncated, d.ResultBytes, len(d.ResultPrefix))
	}
}

// A result one byte over the limit is the handler's error, saying the
// limit; the VM serves on.
func TestResultOverTheLimit(t *testing.T) {
	_, c, vm := bootedEcho(t)
	ctx := context.Background()
	inv, err := c.InvokeVM(ctx, vm.ID, json.RawMessage(fmt.Sprintf(`{"op":"big","bytes":%d}`, agent.MaxResult+1)),
		client.InvokeOptions{Timeout: 2 * time.Minute})
	if err != nil || inv.OK || inv.Error == nil || inv.Error.Type != "ResultTooLarge" ||
		!strings.Contains(inv.Error.Message, strconv.Itoa(agent.MaxResult)) {
		t.Fatalf("InvokeVM = %+v, %v; want a ResultTooLarge error naming the limit", inv, err)
	}
	inv, err = c.InvokeVM(ctx, vm.ID, json.RawMessage(`{"after":1}`), client.InvokeOptions{})
	if err != nil || !inv.OK || string(inv.Result) != `{"after":1}` {
		t.Fatalf("the next invocation: %+v, %v", inv, err)
	}
}

// A caller that reads slowly gets the whole result; one that stops reading
// is cut off once a MiB of it has waited ResultWriteIdle, and sees an
// answer shorter than its Content-Length.
func TestSlowCallers(t *testing.T) {
	svc, _, _, c := fakeDaemon(t)
	vm, err := c.BootVM(context.Background(), "echo")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(New(svc, discard, Options{Token: testToken, ResultWriteIdle: time.Second}))
	t.Cleanup(srv.Close)
	const n = 8 << 20
	invoke := func() *http.Response {
		conn, err := net.Dial("tcp", srv.Listener.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// A small receive buffer, which the kernel does not grow: the
		// daemon's writes wait on the reader after a few MiB.
		if err := conn.(*net.TCPConn).SetReadBuffer(64 << 10); err != nil {
			t.Fatal(err)
		}
		body := bigEvent(n)
		fmt.Fprintf(conn, "POST /v1/vms/%s/invoke HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"+
			"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", vm.ID, srv.Listener.Addr(), testToken, len(body), body)
		rd := bufio.NewReaderSize(conn, 4096)
		resp, err := http.ReadResponse(rd, nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("answer: %v %v", resp, err)
		}
		return resp
	}
	t.Run("slow", func(t *testing.T) {
		resp := invoke()
		var got bytes.Buffer
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			got.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("after %d bytes: %v", got.Len(), err)
			}
			time.Sleep(time.Millisecond)
		}
		if !bytes.Contains(got.Bytes(), vmmtest.BigResult(n)) || int64(got.Len()) != resp.ContentLength {
			t.Fatalf("got %d bytes of %d, without the whole result", got.Len(), resp.ContentLength)
		}
	})
	t.Run("stopped", func(t *testing.T) {
		resp := invoke()
		time.Sleep(4 * time.Second) // the daemon gives up after 1 s without progress
		n, err := io.Copy(io.Discard, resp.Body)
		if err == nil || !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Fatalf("read %d of %d bytes, then %v; want the answer cut off", n, resp.ContentLength, err)
		}
		if n >= resp.ContentLength {
			t.Fatalf("read all %d bytes", n)
		}
	})
}
