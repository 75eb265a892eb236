package pool

import (
	"log/slog"
	"time"
)

// Pressure stops VMs kept ahead of requests, one per reading, while the
// host's available memory is below MinAvailableMiB: they are a cache, and
// a host short of memory needs it more than a warm start does. Ready
// clones go before idle VMs; one VM goes per reading, so the next reading
// sees what it freed.
type Pressure struct {
	Every           time.Duration
	MinAvailableMiB int
	// Available reads the host's available memory in MiB; false: unknown.
	Available func() (int, bool)
	// Ready stops the oldest ready clone for why; false if there is none.
	Ready func(why string) bool
	// Idle stops the longest idle VM for why; false if none is idle.
	Idle func(why string) bool
	Log  *slog.Logger
}

// Watch reads the host's memory every p.Every until stop is closed.
func (p Pressure) Watch(stop <-chan struct{}) {
	every(stop, p.Every, nil, p.check)
}

// check stops one VM if the host's available memory is low.
func (p Pressure) check() {
	avail, ok := p.Available()
	if !ok || avail >= p.MinAvailableMiB {
		return
	}
	if p.Ready(WhyPressure) {
		p.Log.Warn("host memory low: stopped the oldest ready clone", "available_mib", avail,
			"min_available_mib", p.MinAvailableMiB)
	} else if p.Idle(WhyPressure) {
		p.Log.Warn("host memory low: stopped the longest idle vm", "available_mib", avail,
			"min_available_mib", p.MinAvailableMiB)
	}
}
