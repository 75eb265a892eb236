package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const qmpGreeting = `{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": ""}, "capabilities": ["oob"]}}`

// closeConn, returned as a reply line, makes the fake server hang up.
const closeConn = "\x00close"

type qmpRequest struct {
	Execute   string          `json:"execute"`
	Arguments json.RawMessage `json:"arguments"`
	ID        json.RawMessage `json:"id"`
}

// withID adds QMP's optional command "id" to a reply object, as QEMU echoes
// it; replies to requests without an id are left alone.
func withID(line string, id json.RawMessage) string {
	if len(id) == 0 || !strings.HasPrefix(line, "{") {
		return line
	}
	return `{"id": ` + string(id) + `, ` + strings.TrimPrefix(line, "{")
}

// fakeQMP is a QMP server on a Unix socket that serves one connection.
type fakeQMP struct {
	path string

	mu     sync.Mutex
	reqs   []qmpRequest
	conn   net.Conn
	closed bool
	passed []string // files received with requests (SCM_RIGHTS), by path
}

// fdReader reads a Unix connection and keeps the descriptors that arrive.
type fdReader struct {
	c *net.UnixConn
	f *fakeQMP
}

func (r fdReader) Read(p []byte) (int, error) {
	oob := make([]byte, 256)
	n, oobn, _, _, err := r.c.ReadMsgUnix(p, oob)
	if oobn > 0 {
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			fds, _ := unix.ParseUnixRights(&m)
			for _, fd := range fds {
				path, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
				unix.Close(fd)
				r.f.mu.Lock()
				r.f.passed = append(r.f.passed, path)
				r.f.mu.Unlock()
			}
		}
	}
	return n, err
}

// replyFunc answers a request with raw lines; n counts earlier requests with
// the same command. nil means no answer.
type replyFunc func(req qmpRequest, n int) []string

// capsOK answers qmp_capabilities like QEMU and delegates the rest.
func capsOK(next replyFunc) replyFunc {
	return func(req qmpRequest, n int) []string {
		if req.Execute == "qmp_capabilities" {
			return []string{`{"return": {}}`}
		}
		if next == nil {
			return nil
		}
		return next(req, n)
	}
}

func startFakeQMP(t *testing.T, greeting string, reply replyFunc) *fakeQMP {
	t.Helper()
	f := &fakeQMP{path: filepath.Join(t.TempDir(), "qmp.sock")}
	ln, err := net.Listen("unix", f.path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		f.mu.Lock()
		f.conn = c
		closed := f.closed
		f.mu.Unlock()
		defer c.Close()
		if closed {
			return
		}
		if _, err := io.WriteString(c, greeting+"\n"); err != nil {
			return
		}
		sc := bufio.NewScanner(fdReader{c.(*net.UnixConn), f})
		counts := map[string]int{}
		for sc.Scan() {
			var req qmpRequest
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				t.Errorf("fake qmp: request is not JSON: %q", sc.Bytes())
				return
			}
			f.mu.Lock()
			f.reqs = append(f.reqs, req)
			f.mu.Unlock()
			n := counts[req.Execute]
			counts[req.Execute]++
			for _, line := range reply(req, n) {
				if line == closeConn {
					return
				}
				if strings.HasPrefix(line, `{"return"`) || strings.HasPrefix(line, `{"error"`) {
					line = withID(line, req.ID)
				}
				if _, err := io.WriteString(c, line+"\n"); err != nil {
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		f.mu.Lock()
		f.closed = true
		if f.conn != nil {
			f.conn.Close()
		}
		f.mu.Unlock()
		<-done
	})
	return f
}

func (f *fakeQMP) commands() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.reqs {
		out = append(out, r.Execute)
	}
	return out
}

func (f *fakeQMP) requests() []qmpRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]qmpRequest(nil), f.reqs...)
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialFake starts a fake QMP server with reply and connects to it.
func dialFake(t *testing.T, reply replyFunc) (*QMP, *fakeQMP) {
	t.Helper()
	f := startFakeQMP(t, qmpGreeting, capsOK(reply))
	q, err := DialQMP(testCtx(t), f.path)
	if err != nil {
		t.Fatalf("DialQMP: %v", err)
	}
	t.Cleanup(func() { q.Close() })
	return q, f
}

func jsonEqual(t *testing.T, got []byte, want string) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("not JSON: %q: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("bad expectation %q: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func TestDialQMPNegotiatesCapabilities(t *testing.T) {
	_, f := dialFake(t, nil)
	reqs := f.requests()
	if len(reqs) != 1 || reqs[0].Execute != "qmp_capabilities" || len(reqs[0].Arguments) != 0 {
		t.Fatalf("requests after dial = %+v, want one qmp_capabilities without arguments", reqs)
	}
}

func TestDialQMPFailures(t *testing.T) {
	tests := []struct {
		name     string
		greeting string
		reply    replyFunc
		wantMsg  string
		wantQMP  *QMPError
		missing  bool // no socket: DialQMP retries until its deadline
	}{
		{name: "socket never appears", missing: true, wantMsg: "dial qmp"},
		{name: "greeting is not JSON", greeting: "QEMU says hello", wantMsg: "qmp greeting"},
		{name: "greeting without QMP object", greeting: `{"return": {}}`, wantMsg: "qmp greeting"},
		{name: "connection closed after greeting", greeting: qmpGreeting,
			reply:   func(qmpRequest, int) []string { return []string{closeConn} },
			wantMsg: "qmp qmp_capabilities: read"},
		{name: "capabilities refused", greeting: qmpGreeting,
			reply: func(qmpRequest, int) []string {
				return []string{`{"error": {"class": "CommandNotFound", "desc": "Capabilities negotiation is already complete"}}`}
			},
			wantQMP: &QMPError{Command: "qmp_capabilities", Class: "CommandNotFound", Desc: "Capabilities negotiation is already complete"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply := tt.reply
			if reply == nil {
				reply = func(qmpRequest, int) []string { return nil }
			}
			ctx, path := testCtx(t), filepath.Join(t.TempDir(), "qmp.sock")
			if tt.missing {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			} else {
				path = startFakeQMP(t, tt.greeting, reply).path
			}
			q, err := DialQMP(ctx, path)
			if err == nil {
				q.Close()
				t.Fatal("DialQMP succeeded")
			}
			if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not mention %q", err, tt.wantMsg)
			}
			if tt.wantQMP != nil {
				var qe *QMPError
				if !errors.As(err, &qe) || *qe != *tt.wantQMP {
					t.Errorf("error %v, want %+v", err, tt.wantQMP)
				}
			}
		})
	}
}

func TestQMPExecute(t *testing.T) {
	const stopEvent = `{"timestamp": {"seconds": 1732244375, "microseconds": 786000}, "event": "STOP"}`
	tests := []struct {
		name       string
		cmd        string
		args       any
		reply      []string
		wantReturn string // JSON; "" when an error is expected
		wantArgs   string // JSON of the arguments the server must see; "" for none
		wantErr    *QMPError
		wantMsg    string
	}{
		{name: "plain return", cmd: "cont", reply: []string{`{"return": {}}`}, wantReturn: `{}`},
		{name: "arguments are sent", cmd: "migrate", args: map[string]any{"uri": "exec:cat > '/x/vmstate'"},
			reply: []string{`{"return": {}}`}, wantReturn: `{}`, wantArgs: `{"uri": "exec:cat > '/x/vmstate'"}`},
		{name: "events before the return are skipped", cmd: "stop",
			reply:      []string{stopEvent, `{"event": "RESUME", "timestamp": {"seconds": 1, "microseconds": 2}}`, `{"return": {"status": "paused"}}`},
			wantReturn: `{"status": "paused"}`},
		{name: "error reply", cmd: "migrate-incoming",
			reply:   []string{`{"error": {"class": "GenericError", "desc": "The incoming migration has already been started"}}`},
			wantErr: &QMPError{Command: "migrate-incoming", Class: "GenericError", Desc: "The incoming migration has already been started"},
			wantMsg: "qmp migrate-incoming: GenericError: The incoming migration has already been started"},
		{name: "event before an error reply", cmd: "cont",
			reply:   []string{stopEvent, `{"error": {"class": "DeviceNotActive", "desc": "no"}}`},
			wantErr: &QMPError{Command: "cont", Class: "DeviceNotActive", Desc: "no"}},
		{name: "malformed reply", cmd: "cont", reply: []string{`{"return": `}, wantMsg: "qmp cont: bad reply"},
		{name: "connection closed", cmd: "cont", reply: []string{closeConn}, wantMsg: "qmp cont: read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, f := dialFake(t, func(req qmpRequest, _ int) []string { return tt.reply })
			raw, err := q.Execute(testCtx(t), tt.cmd, tt.args)
			if tt.wantReturn != "" {
				if err != nil {
					t.Fatalf("Execute: %v", err)
				}
				if !jsonEqual(t, raw, tt.wantReturn) {
					t.Errorf("Execute returned %s, want %s", raw, tt.wantReturn)
				}
			} else if err == nil {
				t.Fatalf("Execute = %s, want an error", raw)
			}
			if tt.wantErr != nil {
				var qe *QMPError
				if !errors.As(err, &qe) {
					t.Fatalf("error %v (%T) is not a *QMPError", err, err)
				}
				if *qe != *tt.wantErr {
					t.Errorf("QMPError = %+v, want %+v", *qe, *tt.wantErr)
				}
			}
			if tt.wantMsg != "" && !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not contain %q", err, tt.wantMsg)
			}
			reqs := f.requests()
			last := reqs[len(reqs)-1]
			if last.Execute != tt.cmd {
				t.Fatalf("server saw %q, want %q", last.Execute, tt.cmd)
			}
			if tt.wantArgs == "" && len(last.Arguments) != 0 {
				t.Errorf("arguments %s sent, want none", last.Arguments)
			}
			if tt.wantArgs != "" && !jsonEqual(t, last.Arguments, tt.wantArgs) {
				t.Errorf("arguments %s, want %s", last.Arguments, tt.wantArgs)
			}
		})
	}
}

func TestQMPUsableAfterErrorReply(t *testing.T) {
	q, f := dialFake(t, func(req qmpRequest, n int) []string {
		if req.Execute == "cont" && n == 0 {
			return []string{`{"error": {"class": "GenericError", "desc": "not yet"}}`}
		}
		return []string{`{"return": {"status": "running", "running": true}}`}
	})
	ctx := testCtx(t)
	if _, err := q.Execute(ctx, "cont", nil); err == nil {
		t.Fatal("first cont succeeded, want the error reply")
	}
	st, err := q.RunState(ctx)
	if err != nil {
		t.Fatalf("RunState after an error reply: %v", err)
	}
	if st != "running" {
		t.Fatalf("RunState = %q, want running", st)
	}
	if got := strings.Join(f.commands(), ","); got != "qmp_capabilities,cont,query-status" {
		t.Fatalf("commands %s", got)
	}
}

func TestQMPRunStateSkipsEvents(t *testing.T) {
	q, _ := dialFake(t, func(req qmpRequest, _ int) []string {
		return []string{
			`{"timestamp": {"seconds": 1, "microseconds": 0}, "event": "MIGRATION", "data": {"status": "completed"}}`,
			`{"return": {"status": "postmigrate", "singlestep": false, "running": false}}`,
		}
	})
	st, err := q.RunState(testCtx(t))
	if err != nil || st != "postmigrate" {
		t.Fatalf("RunState = %q, %v; want postmigrate", st, err)
	}
}

func TestQMPExecuteHonoursContextDeadline(t *testing.T) {
	q, _ := dialFake(t, nil) // never answers anything but qmp_capabilities
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := q.Execute(ctx, "query-status", nil)
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Execute without an answer = %v, want a deadline error", err)
	}
}

func TestQMPLateReplyIsNotTakenForTheNextCommand(t *testing.T) {
	// query-status times out; QEMU's answer to it arrives just before the
	// answer to the next command. Execute pairs requests and replies by
	// order only (no QMP "id"), so the next command gets the stale reply
	// and the connection stays one reply behind for good. CreateSnapshot
	// hits this: a SaveState that times out is followed by Resume.
	var first json.RawMessage
	q, _ := dialFake(t, func(req qmpRequest, n int) []string {
		switch req.Execute {
		case "query-status":
			first = req.ID
			return nil // answered late, below
		case "cont":
			return []string{
				withID(`{"return": {"status": "paused", "running": false}}`, first),
				withID(`{"return": {"answer-to": "cont"}}`, req.ID),
			}
		}
		return []string{`{"return": {}}`}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := q.Execute(ctx, "query-status", nil); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("query-status = %v, want a deadline error", err)
	}
	raw, err := q.Execute(testCtx(t), "cont", nil)
	if err != nil {
		return // refusing to use a connection that lost track is fine too
	}
	if !jsonEqual(t, raw, `{"answer-to": "cont"}`) {
		t.Fatalf("cont returned %s: the reply to the timed-out query-status", raw)
	}
}

func TestWaitMigration(t *testing.T) {
	tests := []struct {
		name     string
		statuses []string // query-migrate returns, in order; the last repeats
		wantErr  string   // "" for success
		wantPoll int      // query-migrate calls expected
	}{
		{name: "active then completed", statuses: []string{
			`{"status": "setup"}`, `{"status": "active", "total-time": 3}`, `{"status": "active"}`, `{"status": "completed", "total-time": 12}`,
		}, wantPoll: 4},
		{name: "completed at once", statuses: []string{`{"status": "completed"}`}, wantPoll: 1},
		{name: "failed with error-desc", statuses: []string{
			`{"status": "active"}`, `{"status": "failed", "error-desc": "Unable to write to command: Broken pipe"}`,
		}, wantErr: "migration failed: Unable to write to command: Broken pipe", wantPoll: 2},
		{name: "failed without error-desc", statuses: []string{`{"status": "failed"}`},
			wantErr: "migration failed: failed", wantPoll: 1},
		{name: "cancelled", statuses: []string{`{"status": "cancelling"}`, `{"status": "cancelled"}`},
			wantErr: "migration cancelled", wantPoll: 2},
		{name: "error reply to query-migrate", statuses: []string{`ERROR`},
			wantErr: "qmp query-migrate: GenericError: no migration", wantPoll: 1},
		{name: "return of the wrong shape", statuses: []string{`[]`},
			wantErr: "query-migrate:", wantPoll: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, f := dialFake(t, func(req qmpRequest, n int) []string {
				if req.Execute != "query-migrate" {
					t.Errorf("unexpected command %q", req.Execute)
					return []string{`{"return": {}}`}
				}
				s := tt.statuses[min(n, len(tt.statuses)-1)]
				if s == "ERROR" {
					return []string{`{"error": {"class": "GenericError", "desc": "no migration"}}`}
				}
				// An event between polls must not be mistaken for the answer.
				return []string{`{"event": "MIGRATION_PASS", "data": {"pass": 1}, "timestamp": {"seconds": 1, "microseconds": 1}}`, `{"return": ` + s + `}`}
			})
			err := q.WaitMigration(testCtx(t))
			if tt.wantErr == "" && err != nil {
				t.Fatalf("WaitMigration: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("WaitMigration = %v, want an error containing %q", err, tt.wantErr)
			}
			polls := 0
			for _, c := range f.commands() {
				if c == "query-migrate" {
					polls++
				}
			}
			if polls != tt.wantPoll {
				t.Errorf("query-migrate polled %d times, want %d", polls, tt.wantPoll)
			}
		})
	}
}

func TestWaitMigrationStopsAtContextDeadline(t *testing.T) {
	q, _ := dialFake(t, func(qmpRequest, int) []string { return []string{`{"return": {"status": "active"}}`} })
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := q.WaitMigration(ctx)
	if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("WaitMigration of a migration that never ends = %v, want a deadline error", err)
	}
}

// The Machine methods that only talk QMP, against the fake server: no QEMU
// process is involved.
func TestMachineQMPCommands(t *testing.T) {
	dir := t.TempDir()
	savePath := filepath.Join(dir, "it's", "vmstate")
	loadPath := filepath.Join(dir, "saved-vmstate")
	os.MkdirAll(filepath.Dir(savePath), 0o700)
	os.WriteFile(loadPath, []byte("stream"), 0o600)
	type machineCase struct {
		name       string
		run        func(m *Machine, ctx context.Context) error
		wantCmds   string
		wantArgs   map[string]string // command -> arguments JSON
		wantPassed string            // file handed over with getfd
	}
	// stateCase is SaveState or LoadState (run) of path, a migration with
	// the command migrate over a descriptor.
	stateCase := func(name, migrate, path string, run func(*Machine, context.Context, string) error) machineCase {
		return machineCase{name: name,
			run:      func(m *Machine, ctx context.Context) error { return run(m, ctx, path) },
			wantCmds: "migrate-set-capabilities,getfd," + migrate + ",query-migrate,query-migrate",
			wantArgs: map[string]string{
				"migrate-set-capabilities": `{"capabilities": [{"capability": "x-ignore-shared", "state": true}]}`,
				"getfd":                    `{"fdname": "thaw-state"}`,
				migrate:                    `{"uri": "fd:thaw-state"}`,
			}, wantPassed: path}
	}
	tests := []machineCase{
		{name: "Pause", run: (*Machine).Pause, wantCmds: "stop"},
		{name: "Resume", run: (*Machine).Resume, wantCmds: "cont"},
		stateCase("SaveState", "migrate", savePath, (*Machine).SaveState),
		stateCase("LoadState", "migrate-incoming", loadPath, (*Machine).LoadState),
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, f := dialFake(t, func(req qmpRequest, n int) []string {
				if req.Execute == "query-migrate" {
					if n == 0 {
						return []string{`{"return": {"status": "active"}}`}
					}
					return []string{`{"return": {"status": "completed"}}`}
				}
				return []string{`{"return": {}}`}
			})
			m := &Machine{qmp: q}
			if err := tt.run(m, testCtx(t)); err != nil {
				t.Fatalf("%s: %v", tt.name, err)
			}
			reqs := f.requests()[1:] // after qmp_capabilities
			var cmds []string
			for _, r := range reqs {
				cmds = append(cmds, r.Execute)
				if want, ok := tt.wantArgs[r.Execute]; ok && !jsonEqual(t, r.Arguments, want) {
					t.Errorf("%s arguments %s, want %s", r.Execute, r.Arguments, want)
				}
			}
			if got := strings.Join(cmds, ","); got != tt.wantCmds {
				t.Fatalf("commands %s, want %s", got, tt.wantCmds)
			}
			f.mu.Lock()
			passed := strings.Join(f.passed, ",")
			f.mu.Unlock()
			if passed != tt.wantPassed {
				t.Errorf("descriptors passed: %q, want %q", passed, tt.wantPassed)
			}
		})
	}
	if st, err := os.Stat(savePath); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("state file: %v, %v (want mode 0600)", st, err)
	}
	// The state file is created exclusively: an existing file is not overwritten.
	q, _ := dialFake(t, func(qmpRequest, int) []string { return []string{`{"return": {}}`} })
	if err := (&Machine{qmp: q}).SaveState(testCtx(t), savePath); err == nil {
		t.Errorf("SaveState over an existing file succeeded")
	}
}
