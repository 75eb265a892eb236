package catalog

import (
	"context"
	"fmt"
	"time"
)

// InvocationLogs is what one invocation wrote, kept with its record in
// the invocation history and pruned with it.
type InvocationLogs struct {
	// Seq orders the logs as they were recorded; it only grows (it is
	// never reused, even after every row was deleted), so a follower's
	// position stays valid.
	Seq        int64
	Invocation string
	Function   string
	TraceID    string
	// Output is the invocation's stdout and stderr as kept (cut if it was
	// long), OutputBytes how many bytes were written in all, CutBytes how
	// many of them Output lacks; Kernel the guest kernel's messages.
	Output      string
	OutputBytes int64
	CutBytes    int64
	Kernel      string
	// CreatedAt is the invocation record's.
	CreatedAt time.Time
}

const logsSchema = `
CREATE TABLE IF NOT EXISTS invocation_logs (
	seq INTEGER PRIMARY KEY AUTOINCREMENT, invocation TEXT NOT NULL UNIQUE, function TEXT NOT NULL,
	trace_id TEXT NOT NULL, output TEXT NOT NULL, output_bytes INTEGER NOT NULL, cut_bytes INTEGER NOT NULL,
	kernel TEXT NOT NULL, size INTEGER NOT NULL, created_at TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS invocation_logs_function ON invocation_logs(function, seq);
CREATE INDEX IF NOT EXISTS invocation_logs_created ON invocation_logs(created_at);
`

// PutInvocationLogs records an invocation's logs (after its record) and
// sets l.Seq.
func (c *DB) PutInvocationLogs(ctx context.Context, l *InvocationLogs) error {
	res, err := c.db.ExecContext(ctx, `INSERT INTO invocation_logs
		(invocation, function, trace_id, output, output_bytes, cut_bytes, kernel, size, created_at) VALUES (?,?,?,?,?,?,?,?,?)`,
		l.Invocation, l.Function, l.TraceID, l.Output, l.OutputBytes, l.CutBytes, l.Kernel, len(l.Output)+len(l.Kernel), ts(l.CreatedAt))
	if isUnique(err) {
		return fmt.Errorf("logs of invocation %s: %w", l.Invocation, ErrExists)
	}
	if err != nil {
		return err
	}
	l.Seq, err = res.LastInsertId()
	return err
}

// LogsQuery selects invocations' logs, oldest first.
type LogsQuery struct {
	Function   string    // required
	Invocation string    // only this invocation's, if set
	Since      time.Time // only those recorded at or after it, if set
	FromSeq    int64     // only those with Seq at or above it
	Limit      int       // at most this many (1 to 1000; others: 100)
}

// ListInvocationLogs returns the logs q selects, in Seq order.
func (c *DB) ListInvocationLogs(ctx context.Context, q LogsQuery) ([]*InvocationLogs, error) {
	if q.Limit <= 0 || q.Limit > 1000 {
		q.Limit = 100
	}
	since := ""
	if !q.Since.IsZero() {
		since = ts(q.Since)
	}
	return queryAll(ctx, c.db, scanLogs, `SELECT seq, invocation, function, trace_id, output, output_bytes, cut_bytes, kernel, created_at
		FROM invocation_logs WHERE function=? AND seq>=? AND (?='' OR invocation=?) AND created_at>=?
		ORDER BY seq LIMIT ?`, q.Function, q.FromSeq, q.Invocation, q.Invocation, since, q.Limit)
}

func scanLogs(s scanner) (*InvocationLogs, error) {
	var l InvocationLogs
	var created string
	if err := s.Scan(&l.Seq, &l.Invocation, &l.Function, &l.TraceID, &l.Output, &l.OutputBytes, &l.CutBytes, &l.Kernel, &created); err != nil {
		return nil, err
	}
	l.CreatedAt = parseTS(created)
	return &l, nil
}

// InvocationFunction is the function of a recorded invocation
// (ErrNotFound if the history has no such record).
func (c *DB) InvocationFunction(ctx context.Context, id string) (string, error) {
	return queryText(ctx, c.db, fmt.Errorf("invocation %q: %w", id, ErrNotFound), `SELECT function FROM invocations WHERE id=?`, id)
}

// PruneInvocationLogs deletes the logs whose invocation records are gone
// (PruneInvocations deletes the oldest records first, so these are the
// logs older than the oldest record), then, if maxBytes is positive, the
// oldest logs until those left hold at most maxBytes of text. It says
// how many went.
func (c *DB) PruneInvocationLogs(ctx context.Context, maxBytes int64) (int64, error) {
	res, err := c.db.ExecContext(ctx, `DELETE FROM invocation_logs
		WHERE created_at < COALESCE((SELECT MIN(created_at) FROM invocations), '~')`)
	if err != nil {
		return 0, err
	}
	n, _ := res.RowsAffected()
	if maxBytes <= 0 {
		return n, nil
	}
	res, err = c.db.ExecContext(ctx, `DELETE FROM invocation_logs WHERE seq <= COALESCE(
		(SELECT seq FROM (SELECT seq, SUM(size) OVER (ORDER BY seq DESC) AS newer FROM invocation_logs)
		 WHERE newer > ? ORDER BY seq DESC LIMIT 1), 0)`, maxBytes)
	if err != nil {
		return n, err
	}
	k, _ := res.RowsAffected()
	return n + k, nil
}
