package snapshots

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// pinSession is a strategy's session that only starts and closes.
type pinSession struct{ restore.Session }

func (pinSession) Started(context.Context, int) error { return nil }
func (pinSession) Close() error                       { return nil }

// writeSet writes a set (one file holding gen) into dir.
func writeSet(t *testing.T, dir, gen string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ws.bin"), []byte(gen), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readSet(t *testing.T, snapDir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(snapDir, "strategies", "reap", "ws.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// swapAsync swaps staging in and says when it is done.
func swapAsync(p *Pins, snapDir, staging string) <-chan error {
	done := make(chan error, 1)
	go func() { done <- p.Swap(snapDir, restore.REAP, staging) }()
	return done
}

// A swap waits for the restores between Begin and Started (or Close), and
// a begin that fails holds nothing; the swap exchanges the sets, removing
// the old one, and a first set is renamed into place.
func TestPinsHoldSwapsUntilStarted(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "snap-000000000001")
	p := NewPins(root)
	first := p.Staging(dir, restore.REAP, "op-1")
	writeSet(t, first, "1")
	if err := p.Swap(dir, restore.REAP, first); err != nil || readSet(t, dir) != "1" {
		t.Fatalf("first swap: %v", err)
	}
	if _, err := os.Stat(first); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("staging left after a first swap: %v", err)
	}
	begin := p.Begin(func(context.Context, restore.Snapshot, restore.Env) (restore.Session, error) {
		return pinSession{}, nil
	})
	failing := p.Begin(func(context.Context, restore.Snapshot, restore.Env) (restore.Session, error) {
		return nil, errors.New("no set")
	})
	if _, err := failing(ctx, restore.Snapshot{Dir: dir}, restore.Env{}); err == nil {
		t.Fatal("a failing begin succeeded")
	}
	for gen, end := range map[string]func(restore.Session) error{
		"2": func(s restore.Session) error { return s.Started(ctx, 1) },
		"3": func(s restore.Session) error { return s.Close() },
	} {
		sess, err := begin(ctx, restore.Snapshot{Dir: dir}, restore.Env{})
		if err != nil {
			t.Fatal(err)
		}
		staging := p.Staging(dir, restore.REAP, "op-"+gen)
		writeSet(t, staging, gen)
		done := swapAsync(p, dir, staging)
		select {
		case err := <-done:
			t.Fatalf("swap %s ran under a pinned restore: %v", gen, err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := end(sess); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if got := readSet(t, dir); got != gen {
			t.Fatalf("set %q in place, want %q", got, gen)
		}
		if _, err := os.Stat(staging); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("old set left in staging: %v", err)
		}
		if err := sess.Close(); err != nil { // a second release is harmless
			t.Fatal(err)
		}
	}
}

// Trust marks a set's files verified; RemoveStaging removes only the
// staging directories under the snapshots and counts them.
func TestPinsTrustAndRemoveStaging(t *testing.T) {
	root := t.TempDir()
	p := NewPins(root)
	a, b := filepath.Join(root, "snap-a"), filepath.Join(root, "snap-b")
	writeSet(t, filepath.Join(a, "strategies", "reap"), "1")
	p.Trust(a, restore.REAP)
	full := true
	if err := snapshot.VerifyOnce(filepath.Join(a, "strategies", "reap", "ws.bin"), func(f bool) error { full = f; return nil }); err != nil || full {
		t.Fatalf("trusted file verified in full (%v, %v)", full, err)
	}
	writeSet(t, p.Staging(a, restore.REAP, "op-1"), "2")
	writeSet(t, p.Staging(b, restore.FaaSnap, "op-2"), "3")
	writeSet(t, filepath.Join(b, "keep"), "4")
	if err := os.WriteFile(filepath.Join(b, StagingPrefix+"file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	n, err := p.RemoveStaging()
	if err != nil || n != 2 {
		t.Fatalf("removed %d, %v; want 2", n, err)
	}
	left, _ := filepath.Glob(filepath.Join(root, "*", StagingPrefix+"*"))
	if len(left) != 1 || filepath.Base(left[0]) != StagingPrefix+"file" {
		t.Fatalf("left %v, want only the file", left)
	}
	if readSet(t, a) != "1" {
		t.Fatal("the set in place was touched")
	}
	if _, err := os.Stat(filepath.Join(b, "keep", "ws.bin")); err != nil {
		t.Fatal(err)
	}
}
