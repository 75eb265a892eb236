package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/lineio"
)

// QMP is a minimal client for the QEMU Machine Protocol: one connection,
// commands executed one at a time, asynchronous events discarded except for
// those a caller waits on. It speaks only what thaw needs (stop, cont,
// migrate, query-*), which keeps it small enough to read in one sitting.
type QMP struct {
	conn net.Conn
	rd   *bufio.Reader
	mu   sync.Mutex // one command in flight at a time
	next uint64     // id of the last command sent
}

// QMPError is an error reply from QEMU ("error": {"class", "desc"}).
type QMPError struct {
	Command string
	Class   string
	Desc    string
}

func (e *QMPError) Error() string {
	return fmt.Sprintf("qmp %s: %s: %s", e.Command, e.Class, e.Desc)
}

// DialQMP connects to a QMP Unix socket, retrying until ctx ends (QEMU
// creates the socket a few milliseconds after it starts), reads the greeting
// and negotiates capabilities.
func DialQMP(ctx context.Context, path string) (*QMP, error) {
	var conn net.Conn
	var err error
	for {
		var d net.Dialer
		conn, err = d.DialContext(ctx, "unix", path)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("dial qmp %s: %w", path, err)
		case <-time.After(2 * time.Millisecond):
		}
	}
	return NewQMP(ctx, conn)
}

// NewQMP reads the greeting on a connected QMP socket and negotiates
// capabilities. It takes conn over, closing it on failure.
func NewQMP(ctx context.Context, conn net.Conn) (*QMP, error) {
	q := &QMP{conn: conn, rd: bufio.NewReaderSize(conn, 64<<10)}
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	defer func() { _ = conn.SetDeadline(time.Time{}) }()
	var greeting struct {
		QMP json.RawMessage `json:"QMP"`
	}
	line, err := lineio.Read(q.rd, maxQMPLine, "qmp line")
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if err := json.Unmarshal(line, &greeting); err != nil || greeting.QMP == nil {
		conn.Close()
		return nil, fmt.Errorf("qmp greeting: unexpected %.200q", line)
	}
	if _, err := q.Execute(ctx, "qmp_capabilities", nil); err != nil {
		conn.Close()
		return nil, err
	}
	return q, nil
}

// maxQMPLine bounds one line from QEMU: replies thaw asks for are small.
const maxQMPLine = 1 << 20

// Execute runs one command and returns its "return" value.
func (q *QMP) Execute(ctx context.Context, cmd string, args any) (json.RawMessage, error) {
	return q.execute(ctx, cmd, args, nil)
}

// ExecuteFD runs one command with f passed along (SCM_RIGHTS), as "getfd"
// and "add-fd" want.
func (q *QMP) ExecuteFD(ctx context.Context, cmd string, args any, f *os.File) (json.RawMessage, error) {
	if _, ok := q.conn.(*net.UnixConn); !ok {
		return nil, fmt.Errorf("qmp %s: passing a descriptor needs a Unix socket", cmd)
	}
	return q.execute(ctx, cmd, args, f)
}

func (q *QMP) execute(ctx context.Context, cmd string, args any, f *os.File) (json.RawMessage, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	// Every command carries an id and replies with another id are skipped:
	// after a command timed out, its late reply must not be taken for the
	// answer to the next one.
	q.next++
	id := q.next
	req := map[string]any{"execute": cmd, "id": id}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = q.conn.SetDeadline(dl)
		defer func() { _ = q.conn.SetDeadline(time.Time{}) }()
	}
	b = append(b, '\n')
	if f != nil {
		uc := q.conn.(*net.UnixConn)
		n, _, err := uc.WriteMsgUnix(b, unix.UnixRights(int(f.Fd())), nil)
		if err == nil && n < len(b) {
			_, err = uc.Write(b[n:])
		}
		if err != nil {
			return nil, fmt.Errorf("qmp %s: write: %w", cmd, err)
		}
	} else if _, err := q.conn.Write(b); err != nil {
		return nil, fmt.Errorf("qmp %s: write: %w", cmd, err)
	}
	for {
		line, err := lineio.Read(q.rd, maxQMPLine, "qmp line")
		if err != nil {
			return nil, fmt.Errorf("qmp %s: read: %w", cmd, err)
		}
		resp, err := parseReply(line)
		if err != nil {
			return nil, fmt.Errorf("qmp %s: %w", cmd, err)
		}
		switch {
		case resp.Event != "":
			continue // asynchronous event; thaw polls state instead
		case resp.ID != nil && *resp.ID != id:
			continue // a late reply to an earlier command
		case resp.Error != nil:
			return nil, &QMPError{Command: cmd, Class: resp.Error.Class, Desc: resp.Error.Desc}
		default:
			return resp.Return, nil
		}
	}
}

// reply is one line QEMU sends: a command's answer or an event.
type reply struct {
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string  `json:"event"`
	ID    *uint64 `json:"id"`
}

// parseReply decodes one line; a line that is neither an answer nor an
// event is an error (QEMU never sends one).
func parseReply(line []byte) (*reply, error) {
	var r reply
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("bad reply %.200q: %w", line, err)
	}
	if r.Event == "" && r.Error == nil && r.Return == nil {
		return nil, fmt.Errorf("bad reply %.200q: neither return, error nor event", line)
	}
	return &r, nil
}

// Close closes the connection.
func (q *QMP) Close() error { return q.conn.Close() }

// MigrationStatus is the subset of query-migrate thaw reads.
type MigrationStatus struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
}

// WaitMigration polls query-migrate until the migration completes or fails.
// Polling at 1 ms costs little: a snapshot with x-ignore-shared writes only
// device state (about 1 MB) and finishes in tens of milliseconds.
func (q *QMP) WaitMigration(ctx context.Context) error {
	for {
		raw, err := q.Execute(ctx, "query-migrate", nil)
		if err != nil {
			return err
		}
		var st MigrationStatus
		if err := json.Unmarshal(raw, &st); err != nil {
			return fmt.Errorf("query-migrate: %w", err)
		}
		switch st.Status {
		case "completed":
			return nil
		case "failed", "cancelled":
			if st.ErrorDesc == "" {
				st.ErrorDesc = st.Status
			}
			return fmt.Errorf("migration %s: %w", st.Status, errors.New(st.ErrorDesc))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("migration: %w (last status %q)", ctx.Err(), st.Status)
		case <-time.After(time.Millisecond):
		}
	}
}

// RunState returns the VM run state from query-status ("running", "paused",
// "inmigrate", "postmigrate", ...).
func (q *QMP) RunState(ctx context.Context) (string, error) {
	raw, err := q.Execute(ctx, "query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("query-status: %w", err)
	}
	return st.Status, nil
}
