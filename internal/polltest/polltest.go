// Package polltest waits, in a test, for a condition another goroutine or
// process makes true. Only tests import it.
package polltest

import "time"

// TB is the part of testing.TB that Until uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// The pause between two polls starts at firstPause and doubles up to a
// 200th of the wait, kept between 1 ms and maxPause: a condition that
// holds soon is seen soon, and a long wait polls seldom.
const (
	firstPause = 100 * time.Microsecond
	maxPause   = 100 * time.Millisecond
)

// Until polls cond until it holds, and fails the test, saying what it
// waited for, if it does not within d.
func Until(t TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	most := min(max(d/200, time.Millisecond), maxPause)
	deadline := time.Now().Add(d)
	for pause := firstPause; !cond(); pause = min(2*pause, most) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s (%s)", what, d)
			return
		}
		time.Sleep(pause)
	}
}

// Receive is the next value on ch, and fails the test, saying what it
// waited for, if none comes within d.
func Receive[T any](t TB, ch <-chan T, d time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(d):
		t.Fatalf("timed out waiting for %s (%s)", what, d)
		var zero T
		return zero
	}
}
