package tsc

import (
	"errors"
	"math"
	"testing"
	"time"
)

// Two measurements of the same TSC agree within 0.1 %.
func TestMeasureKHz(t *testing.T) {
	a, err := MeasureKHz(20 * time.Millisecond)
	if errors.Is(err, ErrUnsupported) {
		t.Skipf("no invariant TSC on this host: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	b, err := MeasureKHz(50 * time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := math.Abs(float64(a-b)) / float64(a); d > 0.001 {
		t.Fatalf("two measurements: %d and %d kHz (%.3f %% apart)", a, b, d*100)
	}
	t.Logf("host TSC: %d kHz", a)
}
