// Package tsc measures the host's time-stamp counter frequency.
//
// A guest under TCG reads the host's TSC (QEMU adds an offset, never a
// scale), and a Linux guest calibrates its TSC against the emulated PIT and
// HPET at boot. On a busy host that calibration can go wrong: a guest booted
// while the host's two cores ran other VMs calibrated 693,745 kHz for a
// 2,596,109 kHz TSC, and every clone of its snapshot kept a clock running
// 3.7 times too fast (time.sleep(15) returned after 4.3 s). The daemon
// measures the frequency once and passes it to every boot as
// tsc_early_khz=, which Linux takes instead of calibrating (its later
// refinement may move it by 1 % at most).
package tsc

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
)

// ErrUnsupported: the host's TSC cannot be measured here (another
// architecture, or a TSC that is not invariant).
var ErrUnsupported = errors.New("tsc: no invariant TSC to measure")

// MeasureKHz measures the host's TSC frequency in kHz: five windows of
// window each against CLOCK_MONOTONIC, the median. The result is checked:
// the windows must agree within 0.1 %.
func MeasureKHz(window time.Duration) (int, error) {
	if !supported {
		return 0, ErrUnsupported
	}
	if ok, err := invariant(); err != nil || !ok {
		return 0, errors.Join(ErrUnsupported, err)
	}
	var khz []float64
	for range 5 {
		c0, t0 := rdtsc(), time.Now()
		time.Sleep(window)
		c1, t1 := rdtsc(), time.Now()
		khz = append(khz, float64(c1-c0)/float64(t1.Sub(t0).Nanoseconds())*1e6)
	}
	slices.Sort(khz)
	med := khz[2]
	if med < 1e5 || med > 1e8 {
		return 0, fmt.Errorf("tsc: measured %.0f kHz, outside 100 MHz..100 GHz", med)
	}
	// A window cut short or stretched by preemption between the two reads
	// errs by microseconds; the middle three agree closely.
	if (khz[3]-khz[1])/med > 0.001 {
		return 0, fmt.Errorf("tsc: windows disagree: %.0f..%.0f kHz", khz[1], khz[3])
	}
	return int(med + 0.5), nil
}

// invariant reports whether /proc/cpuinfo lists constant_tsc and
// nonstop_tsc: the TSC ticks at one rate whatever the core's frequency or
// sleep state.
func invariant() (bool, error) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "flags" {
			f := strings.Fields(v)
			return slices.Contains(f, "constant_tsc") && slices.Contains(f, "nonstop_tsc"), nil
		}
	}
	return false, nil
}
