package polltest

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is a TB that keeps what the test would have failed with.
type recorder struct{ failed string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
}

// A condition another goroutine makes true ends the wait without a
// failure, soon after it holds.
func TestUntilHolds(t *testing.T) {
	var done atomic.Bool
	time.AfterFunc(20*time.Millisecond, func() { done.Store(true) })
	r := &recorder{}
	t0 := time.Now()
	Until(r, 5*time.Second, "the flag", done.Load)
	if took := time.Since(t0); r.failed != "" || took > time.Second {
		t.Fatalf("failed %q after %s", r.failed, took)
	}
}

// A condition that never holds fails the test once the wait is over,
// naming what it waited for; cond was polled more than once.
func TestUntilTimesOut(t *testing.T) {
	r := &recorder{}
	polls := 0
	t0 := time.Now()
	Until(r, 50*time.Millisecond, "the impossible", func() bool { polls++; return false })
	if took := time.Since(t0); took < 50*time.Millisecond || polls < 2 {
		t.Fatalf("gave up after %s and %d polls", took, polls)
	}
	if want := "timed out waiting for the impossible (50ms)"; r.failed != want {
		t.Fatalf("failed with %q, want %q", r.failed, want)
	}
}

// Receive returns the value sent in time, and fails the test, naming what
// it waited for, when nothing comes.
func TestReceive(t *testing.T) {
	ch := make(chan int, 1)
	time.AfterFunc(10*time.Millisecond, func() { ch <- 7 })
	r := &recorder{}
	if v := Receive(r, ch, 5*time.Second, "seven"); v != 7 || r.failed != "" {
		t.Fatalf("got %d, failed %q", v, r.failed)
	}
	if v := Receive(r, ch, 20*time.Millisecond, "an eighth"); v != 0 || r.failed != "timed out waiting for an eighth (20ms)" {
		t.Fatalf("got %d, failed %q", v, r.failed)
	}
}
