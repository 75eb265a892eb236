package catalog

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// putWithLogs records an invocation of fn at t and its logs (output of n
// bytes).
func putWithLogs(t *testing.T, db *DB, id, fn string, at time.Time, n int) *InvocationLogs {
	t.Helper()
	ctx := context.Background()
	if err := db.PutInvocation(ctx, &Invocation{ID: id, Function: fn, VM: "vm-1", OK: true, Detail: []byte(`{}`), CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	l := &InvocationLogs{Invocation: id, Function: fn, TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", Output: strings.Repeat("o", n),
		OutputBytes: int64(n), Kernel: "[    1.000000] k\n", CreatedAt: at}
	if err := db.PutInvocationLogs(ctx, l); err != nil {
		t.Fatal(err)
	}
	return l
}

func seqs(ls []*InvocationLogs) []string {
	var out []string
	for _, l := range ls {
		out = append(out, fmt.Sprintf("%d:%s", l.Seq, l.Invocation))
	}
	return out
}

func TestInvocationLogs(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	a := putWithLogs(t, db, "inv-a", "hello", base, 10)
	b := putWithLogs(t, db, "inv-b", "other", base.Add(time.Second), 10)
	c := putWithLogs(t, db, "inv-c", "hello", base.Add(2*time.Second), 10)
	if a.Seq <= 0 || b.Seq <= a.Seq || c.Seq <= b.Seq {
		t.Fatalf("seqs %d %d %d", a.Seq, b.Seq, c.Seq)
	}
	got, err := db.ListInvocationLogs(ctx, LogsQuery{Function: "hello"})
	if err != nil || len(got) != 2 || got[0].Invocation != "inv-a" || got[1].Invocation != "inv-c" {
		t.Fatalf("hello's logs %v %v", seqs(got), err)
	}
	requireSame(t, "read back", got[0], a, func(l *InvocationLogs) []*time.Time { return []*time.Time{&l.CreatedAt} })
	for _, c := range []struct {
		q    LogsQuery
		want string
	}{
		{LogsQuery{Function: "hello", FromSeq: a.Seq + 1}, "inv-c"},
		{LogsQuery{Function: "hello", Invocation: "inv-a"}, "inv-a"},
		{LogsQuery{Function: "hello", Since: base.Add(time.Second)}, "inv-c"},
		{LogsQuery{Function: "hello", Limit: 1}, "inv-a"},
		{LogsQuery{Function: "other", Invocation: "inv-a"}, ""},
		{LogsQuery{Function: "none"}, ""},
	} {
		got, err := db.ListInvocationLogs(ctx, c.q)
		var ids []string
		for _, l := range got {
			ids = append(ids, l.Invocation)
		}
		if err != nil || strings.Join(ids, ",") != c.want {
			t.Errorf("%+v: %v %v, want %s", c.q, ids, err, c.want)
		}
	}
	if err := db.PutInvocationLogs(ctx, &InvocationLogs{Invocation: "inv-a", Function: "hello"}); !errors.Is(err, ErrExists) {
		t.Errorf("second logs of one invocation: %v", err)
	}
	if fn, err := db.InvocationFunction(ctx, "inv-b"); err != nil || fn != "other" {
		t.Errorf("InvocationFunction: %q %v", fn, err)
	}
	if _, err := db.InvocationFunction(ctx, "inv-zz"); !errors.Is(err, ErrNotFound) {
		t.Errorf("InvocationFunction of nothing: %v", err)
	}
}

// TestInvocationLogsPrunedWithTheHistory: logs go with their invocation
// records (by count and by age), the oldest first under a byte budget, and
// positions are never reused, even once every row is gone.
func TestInvocationLogsPrunedWithTheHistory(t *testing.T) {
	db := newDB(t)
	ctx := context.Background()
	for i := range 6 {
		putWithLogs(t, db, fmt.Sprintf("inv-%d", i), "hello", base.Add(time.Duration(i)*time.Minute), 100)
	}
	// The history keeps the newest 4 records: logs 0 and 1 go with theirs.
	if _, err := db.PruneInvocations(ctx, 4, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PruneInvocationLogs(ctx, 0); err != nil || n != 2 {
		t.Fatalf("pruned %d logs (%v), want 2", n, err)
	}
	got, _ := db.ListInvocationLogs(ctx, LogsQuery{Function: "hello"})
	if len(got) != 4 || got[0].Invocation != "inv-2" {
		t.Fatalf("left %v", seqs(got))
	}
	// A budget of 250 bytes (each holds 100 + 17 of kernel text): the two
	// newest stay, the records too.
	if n, err := db.PruneInvocationLogs(ctx, 250); err != nil || n != 2 {
		t.Fatalf("budget pruned %d (%v), want 2", n, err)
	}
	if got, _ = db.ListInvocationLogs(ctx, LogsQuery{Function: "hello"}); len(got) != 2 || got[0].Invocation != "inv-4" {
		t.Fatalf("after the budget %v", seqs(got))
	}
	if b, err := db.InvocationLogsBytes(ctx); err != nil || b != 2*117 {
		t.Errorf("bytes kept %d %v", b, err)
	}
	if invs, _ := db.ListInvocations(ctx, "hello", 10, time.Time{}, ""); len(invs) != 4 {
		t.Errorf("the budget removed records: %d left", len(invs))
	}
	// By age: everything goes; the next logs still come after.
	last := got[1].Seq
	if _, err := db.PruneInvocations(ctx, 0, base.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if n, err := db.PruneInvocationLogs(ctx, 0); err != nil || n != 2 {
		t.Fatalf("with no record left, pruned %d (%v)", n, err)
	}
	if l := putWithLogs(t, db, "inv-new", "hello", base.Add(2*time.Hour), 1); l.Seq <= last {
		t.Errorf("seq %d reused after %d", l.Seq, last)
	}
}

// TestInvocationLogsTableAddedToOlderCatalogs: a catalog made before logs
// existed gets the table when opened, and keeps what it had.
func TestInvocationLogsTableAddedToOlderCatalogs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "catalog.db")
	db := openTest(t, path)
	putWithLogs(t, db, "inv-old", "hello", base, 1)
	db.Close()
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`DROP TABLE invocation_logs`); err != nil {
		t.Fatal(err)
	}
	raw.Close()
	db = openTest(t, path)
	ctx := context.Background()
	if invs, err := db.ListInvocations(ctx, "hello", 10, time.Time{}, ""); err != nil || len(invs) != 1 {
		t.Fatalf("records %v %v", invs, err)
	}
	if got, err := db.ListInvocationLogs(ctx, LogsQuery{Function: "hello"}); err != nil || len(got) != 0 {
		t.Fatalf("logs %v %v", got, err)
	}
	putWithLogs(t, db, "inv-new", "hello", base.Add(time.Second), 1)
}

// InvocationLogsBytes is how much text the kept logs hold.
func (c *DB) InvocationLogsBytes(ctx context.Context) (int64, error) {
	var n int64
	err := c.db.QueryRowContext(ctx, `SELECT COALESCE(SUM(size), 0) FROM invocation_logs`).Scan(&n)
	return n, err
}
