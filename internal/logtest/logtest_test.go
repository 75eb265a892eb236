package logtest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
)

// Lines written at once by many goroutines all arrive whole.
func TestBufferConcurrent(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() { fmt.Fprintf(&b, "line %d\n", i) })
	}
	wg.Wait()
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(got) != 50 {
		t.Fatalf("%d lines, want 50:\n%s", len(got), b.String())
	}
	for i := range 50 {
		if !strings.Contains(b.String(), fmt.Sprintf("line %d\n", i)) {
			t.Errorf("line %d missing", i)
		}
	}
}

// Bytes is what was written, as a copy a later write leaves alone.
func TestBufferBytes(t *testing.T) {
	var b Buffer
	fmt.Fprint(&b, "first")
	got := b.Bytes()
	fmt.Fprint(&b, " second")
	if string(got) != "first" || string(b.Bytes()) != "first second" {
		t.Fatalf("Bytes = %q then %q", got, b.Bytes())
	}
	got[0] = 'F'
	if b.String() != "first second" {
		t.Fatalf("changing the copy changed the buffer: %q", b.String())
	}
}
