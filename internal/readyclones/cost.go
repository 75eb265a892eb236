package readyclones

import "slices"

// costKept is how many of the latest measurements a Cost remembers.
const costKept = 8

// Cost is what one key's ready clone costs in memory, learned from the
// clones measured once ready (their VMM's proportional set size: the
// snapshot's page-cache pages they share are divided among them). Until
// one is measured it is a bound (guest RAM plus the VM's overhead); then
// the largest of the latest measurements, so a clone that shares less
// (the first, or one whose siblings were taken) is not undercounted.
type Cost struct {
	bound  int
	latest []int // MiB, oldest first
}

// NewCost starts at boundMiB.
func NewCost(boundMiB int) *Cost { return &Cost{bound: boundMiB} }

// Measured records a ready clone's memory, in MiB (ignored unless above 0).
func (c *Cost) Measured(mib int) {
	if mib <= 0 {
		return
	}
	if len(c.latest) == costKept {
		c.latest = slices.Delete(c.latest, 0, 1)
	}
	c.latest = append(c.latest, mib)
}

// Estimate is what a clone not measured yet counts, in MiB.
func (c *Cost) Estimate() int {
	if len(c.latest) == 0 {
		return c.bound
	}
	return slices.Max(c.latest)
}

// Learned says whether a clone was measured.
func (c *Cost) Learned() bool { return len(c.latest) > 0 }
