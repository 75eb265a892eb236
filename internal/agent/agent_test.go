package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// request is what the host sends.
type request struct {
	ID       string          `json:"id"`
	Op       string          `json:"op"`
	Function string          `json:"function"`
	Event    json.RawMessage `json:"event"`
}

// guest is the test's end of a fake agent connection.
type guest struct {
	t    *testing.T
	rd   *bufio.Reader
	conn net.Conn
}

// next reads one request; ok is false once the host hung up.
func (g *guest) next() (request, bool) {
	line, err := g.rd.ReadBytes('\n')
	if err != nil {
		return request{}, false
	}
	var r request
	if err := json.Unmarshal(line, &r); err != nil {
		g.t.Errorf("fake guest: request is not JSON: %q", line)
		return request{}, false
	}
	return r, true
}

// send writes raw lines.
func (g *guest) send(lines ...string) {
	for _, l := range lines {
		if _, err := io.WriteString(g.conn, l+"\n"); err != nil {
			return // the host hung up; the test sees it on its side
		}
	}
}

// startGuest listens on a Unix socket (the host end of the VM's
// virtio-serial port) and runs serve on the first connection. When serve
// returns the guest keeps the connection open, reading and ignoring, until
// the host closes it (hang is a guest that stopped answering), unless serve
// closed it.
func startGuest(t *testing.T, serve func(g *guest)) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		conn   net.Conn
		closed bool
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		mu.Lock()
		conn = c
		if closed {
			c.Close()
		}
		mu.Unlock()
		defer c.Close()
		serve(&guest{t: t, rd: bufio.NewReader(c), conn: c})
		_, _ = io.Copy(io.Discard, c)
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		closed = true
		if conn != nil {
			conn.Close()
		}
		mu.Unlock()
		<-done
	})
	return path
}

func dial(t *testing.T, path string) *Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// reply builds a reply line for id from a JSON object body without its id.
func reply(id, body string) string {
	return `{"id":"` + id + `",` + strings.TrimPrefix(body, "{")
}

func TestPing(t *testing.T) {
	reqs := make(chan request, 2)
	path := startGuest(t, func(g *guest) {
		for range 2 {
			r, ok := g.next()
			if !ok {
				return
			}
			reqs <- r
			g.send(reply(r.ID, `{"ok":true,"op":"pong","function":"hello"}`))
		}
	})
	c := dial(t, path)
	for i := range 2 {
		r, err := c.Ping(testCtx(t))
		if err != nil {
			t.Fatalf("Ping %d: %v", i, err)
		}
		if !r.OK || r.Op != "pong" || r.Function == nil || *r.Function != "hello" {
			t.Fatalf("Ping %d = %+v, want ok pong from hello", i, r)
		}
		req := <-reqs
		if want := string(rune('1' + i)); req.Op != "ping" || req.ID != want || r.ID != want {
			t.Errorf("ping %d: guest saw %+v, reply id %q; want op ping with id %s", i, req, r.ID, want)
		}
	}
}

func TestPingNotOK(t *testing.T) {
	path := startGuest(t, func(g *guest) {
		r, _ := g.next()
		g.send(reply(r.ID, `{"ok":false,"error":{"type":"RuntimeError","message":"handler failed to import"}}`))
	})
	c := dial(t, path)
	r, err := c.Ping(testCtx(t))
	var ae *Error
	if !errors.As(err, &ae) || ae.Type != "RuntimeError" || ae.Message != "handler failed to import" {
		t.Fatalf("Ping = %v, want the guest's *Error", err)
	}
	if r == nil || r.OK {
		t.Fatalf("Ping reply = %+v, want the not-ok reply", r)
	}
}

func TestInvoke(t *testing.T) {
	tests := []struct {
		name      string
		event     json.RawMessage
		wantEvent string
		answer    string // reply body without id
		check     func(t *testing.T, r *Reply)
	}{
		{
			name: "success with result and duration", event: json.RawMessage(`{"name":"world","n":[1,2]}`),
			wantEvent: `{"name":"world","n":[1,2]}`,
			answer:    `{"ok":true,"result":{"greeting":"hello world"},"duration_ms":1.25}`,
			check: func(t *testing.T, r *Reply) {
				if !r.OK || string(r.Result) != `{"greeting":"hello world"}` || r.DurationMS != 1.25 || r.Error != nil {
					t.Errorf("reply %+v, want ok, result and 1.25 ms", r)
				}
			},
		},
		{
			name: "no event is sent as null", event: nil, wantEvent: `null`,
			answer: `{"ok":true,"result":null,"duration_ms":0.5}`,
			check: func(t *testing.T, r *Reply) {
				if !r.OK || r.DurationMS != 0.5 {
					t.Errorf("reply %+v", r)
				}
			},
		},
		{
			name: "handler error is a structured reply, not an error", event: json.RawMessage(`1`), wantEvent: `1`,
			answer: `{"ok":false,"error":{"type":"ZeroDivisionError","message":"division by zero","traceback":"Traceback (most recent call last):\n  File \"handler.py\", line 2\nZeroDivisionError: division by zero"},"duration_ms":0.3}`,
			check: func(t *testing.T, r *Reply) {
				if r.OK || r.Error == nil {
					t.Fatalf("reply %+v, want ok=false with an error", r)
				}
				if r.Error.Type != "ZeroDivisionError" || r.Error.Message != "division by zero" ||
					!strings.HasSuffix(r.Error.Traceback, "ZeroDivisionError: division by zero") {
					t.Errorf("error %+v", r.Error)
				}
				if got := r.Error.Error(); got != "ZeroDivisionError: division by zero" {
					t.Errorf("Error() = %q", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reqs := make(chan request, 1)
			path := startGuest(t, func(g *guest) {
				r, ok := g.next()
				if !ok {
					return
				}
				reqs <- r
				g.send(reply(r.ID, tt.answer))
			})
			c := dial(t, path)
			r, err := c.Invoke(testCtx(t), "hello", tt.event)
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			tt.check(t, r)
			req := <-reqs
			if req.Op != "invoke" || req.Function != "hello" || string(req.Event) != tt.wantEvent {
				t.Errorf("guest saw %+v (event %s), want invoke of hello with event %s", req, req.Event, tt.wantEvent)
			}
		})
	}
}

func TestStaleRepliesAndEventsAreSkipped(t *testing.T) {
	path := startGuest(t, func(g *guest) {
		r, _ := g.next()
		g.send(
			`{"event":"ready"}`,
			reply("0", `{"ok":true,"op":"pong"}`),
			reply(r.ID+"0", `{"ok":true,"result":"wrong: id prefix"}`),
			reply("99", `{"ok":false,"error":{"type":"X","message":"stale"}}`),
			`{"event":"ready","function":"hello"}`,
			reply(r.ID, `{"ok":true,"result":"mine","duration_ms":2}`),
		)
	})
	c := dial(t, path)
	r, err := c.Invoke(testCtx(t), "hello", json.RawMessage(`{}`))
	if err != nil {
		t.Fatalf("Invoke: %v", err)
	}
	if string(r.Result) != `"mine"` || r.ID != "1" {
		t.Fatalf("Invoke = %+v, want the reply with id 1", r)
	}
}

func TestLongReplies(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		wantErr string
	}{
		{name: "1 MiB, beyond the 64 KiB read buffer", size: 1 << 20},
		{name: "5 MiB, many buffer refills", size: 5 << 20},
		{name: "beyond MaxResult", size: MaxResult + 100, wantErr: "ResultTooLarge"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := startGuest(t, func(g *guest) {
				r, _ := g.next()
				line := reply(r.ID, `{"ok":true,"result":"`)
				line += strings.Repeat("x", tt.size-len(line)-2) + `"}`
				g.send(line)
			})
			c := dial(t, path)
			r, err := c.Invoke(testCtx(t), "hello", nil)
			if tt.wantErr != "" {
				if err != nil || r.OK || r.Error == nil || r.Error.Type != tt.wantErr {
					t.Fatalf("Invoke = %+v, %v; want a reply with error %q", r, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Invoke: %v", err)
			}
			var s string
			if err := json.Unmarshal(r.Result, &s); err != nil {
				t.Fatalf("result is not a JSON string: %v", err)
			}
			if want := tt.size - len(reply("1", `{"ok":true,"result":"`)) - 2; len(s) != want || strings.Trim(s, "x") != "" {
				t.Fatalf("result is %d bytes, want %d bytes of x", len(s), want)
			}
		})
	}
}

func TestGuestThatNeverAnswers(t *testing.T) {
	path := startGuest(t, func(g *guest) { g.next() })
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Invoke(ctx, "hello", nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Invoke against a silent guest = %v, want ErrTimeout", err)
	}
}

func TestWaitReadyAfterLateStart(t *testing.T) {
	// The guest is slow to open its port: the first two pings get no answer
	// in time. Then it answers everything queued, oldest first, and every
	// later ping. WaitReady must skip the late answers to earlier pings and
	// return the answer to its latest one.
	const ignored = 2
	seen := make(chan []string, 1)
	path := startGuest(t, func(g *guest) {
		var ids []string
		answered := 0
		for {
			r, ok := g.next()
			if !ok {
				seen <- ids
				return
			}
			ids = append(ids, r.ID)
			if len(ids) > ignored {
				for ; answered < len(ids); answered++ {
					id := ids[answered]
					g.send(reply(id, `{"ok":true,"op":"pong","function":"late-`+id+`"}`))
				}
			}
		}
	})
	c := dial(t, path)
	r, err := c.WaitReady(testCtx(t), 20*time.Millisecond)
	if err != nil {
		t.Fatalf("WaitReady: %v", err)
	}
	c.Close()
	ids := <-seen
	if len(ids) <= ignored {
		t.Fatalf("guest saw pings %v, want more than %d", ids, ignored)
	}
	for i, id := range ids {
		if id != strconv.Itoa(i+1) {
			t.Fatalf("guest saw ping ids %v, want 1, 2, 3...", ids)
		}
	}
	if last := ids[len(ids)-1]; r.ID != last || r.Function == nil || *r.Function != "late-"+last {
		t.Fatalf("WaitReady = %+v, want the answer to the last ping %s", r, last)
	}
}

func TestWaitReadyGivesUpWhenContextEnds(t *testing.T) {
	path := startGuest(t, func(g *guest) {}) // never answers
	c := dial(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Millisecond)
	defer cancel()
	_, err := c.WaitReady(ctx, 10*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitReady = %v, want context.DeadlineExceeded", err)
	}
}

func TestWaitReadyReturnsNonTimeoutErrors(t *testing.T) {
	path := startGuest(t, func(g *guest) {
		g.next()
		g.conn.Close() // the guest died
	})
	c := dial(t, path)
	_, err := c.WaitReady(testCtx(t), time.Second)
	if err == nil || errors.Is(err, ErrTimeout) || !errors.Is(err, io.EOF) {
		t.Fatalf("WaitReady against a closed connection = %v, want the read error (EOF)", err)
	}
}

func TestBrokenReplies(t *testing.T) {
	tests := []struct {
		name    string
		answer  func(id string) string
		wantErr string
		wantEOF bool
	}{
		{name: "not JSON", answer: func(string) string { return "Traceback (most recent call last):" }, wantErr: "malformed reply"},
		{name: "truncated JSON", answer: func(id string) string { return `{"id":"` + id + `","ok":tr` }, wantErr: "malformed reply"},
		{name: "wrong type for ok", answer: func(id string) string { return reply(id, `{"ok":"yes"}`) }, wantErr: "malformed reply"},
		{name: "connection closed before a reply", answer: func(string) string { return "\x00close" }, wantEOF: true},
		{name: "connection closed mid-line", answer: func(id string) string { return "\x00close-mid" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := startGuest(t, func(g *guest) {
				r, _ := g.next()
				a := tt.answer(r.ID)
				switch a {
				case "\x00close":
					g.conn.Close()
					return
				case "\x00close-mid":
					_, _ = io.WriteString(g.conn, `{"id":"`+r.ID+`","ok":`)
					g.conn.Close()
					return
				}
				g.send(a)
			})
			c := dial(t, path)
			_, err := c.Invoke(testCtx(t), "hello", nil)
			if err == nil || errors.Is(err, ErrTimeout) {
				t.Fatalf("Invoke = %v, want a protocol error", err)
			}
			if tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %q does not contain %q", err, tt.wantErr)
			}
			if tt.wantEOF && !errors.Is(err, io.EOF) {
				t.Errorf("error %v, want io.EOF", err)
			}
		})
	}
}

func TestDialGivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, filepath.Join(t.TempDir(), "agent.sock"))
	if err == nil || !strings.Contains(err.Error(), "dial agent") {
		t.Fatalf("Dial(missing socket) = %v, want a dial error", err)
	}
}

func TestPingNotOKWithoutErrorDetails(t *testing.T) {
	// A guest that answers ok=false without an "error" object (the daemon's
	// invoke path already expects this from broken guests). Ping wraps
	// r.Error, a nil *Error, so the error reads "ping: <nil>" and errors.As
	// hands callers a nil *Error to dereference.
	path := startGuest(t, func(g *guest) {
		r, _ := g.next()
		g.send(reply(r.ID, `{"ok":false}`))
	})
	c := dial(t, path)
	_, err := c.Ping(testCtx(t))
	if err == nil {
		t.Fatal("Ping of a not-ok guest succeeded")
	}
	if strings.Contains(err.Error(), "<nil>") {
		t.Errorf("Ping error %q carries no information", err)
	}
	if ae := (*Error)(nil); errors.As(err, &ae) && ae == nil {
		t.Errorf("Ping error %v unwraps to a nil *Error", err)
	}
}

// TestGuestPythonUnitTests runs the guest agent's and guest libraries'
// Python unit tests (they need only python3).
func TestGuestPythonUnitTests(t *testing.T) {
	py := python3(t)
	for _, dir := range []string{"../../guest/agent/tests", "../../guest/lib/tests"} {
		out, err := exec.Command(py, "-m", "unittest", "discover", "-s", dir).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", dir, err, out)
		}
	}
}

// python3 is the host's python3. A plain `go test` without it skips the
// guest agent's Python tests; under make test (THAW_IMAGE set, python3
// installed by scripts/install-deps.sh) its absence fails them.
func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("THAW_IMAGE") != "" {
			t.Fatalf("python3 is missing (scripts/install-deps.sh installs it): %v", err)
		}
		t.Skip("python3 is not installed (make test installs it and runs this)")
	}
	return py
}

// Dial connects to the agent socket of a VM, retrying until ctx ends.
func Dial(ctx context.Context, path string) (*Conn, error) {
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return NewConn(c), nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial agent %s: %w", path, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
}
