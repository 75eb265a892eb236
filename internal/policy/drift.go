package policy

// The drift detector's constants (docs/design.md, "Working sets that
// follow the inputs").
const (
	// DriftWindowSize is how many recent cold starts of a strategy the
	// detector looks at.
	DriftWindowSize = 10
	// DriftThreshold: a cold start drifted when more than this share of
	// the pages its guest touched lay outside the recorded set.
	DriftThreshold = 0.20
	// DriftCount drifted cold starts in the window trigger a refresh.
	DriftCount = 5
)

// SetUse is how one restore's guest used a strategy's recorded set.
type SetUse struct {
	SetPages     uint64 // pages the set holds (prefetched, loaded or installed)
	TouchedPages uint64 // set pages the guest touched
	OutsidePages uint64 // non-zero pages the guest touched that the set did not hold (served on demand)
}

// DriftWindow is the outside ratios of a strategy's recent cold starts on
// one set of artifacts, oldest first.
type DriftWindow struct {
	Ratios []float64 `json:"ratios"`
}

// Observe adds one cold start's outside ratio and says whether the window
// now holds DriftCount drifted cold starts (a refresh is due).
func (d *DriftWindow) Observe(ratio float64) bool {
	d.Ratios = append(d.Ratios, ratio)
	if len(d.Ratios) > DriftWindowSize {
		d.Ratios = append([]float64(nil), d.Ratios[len(d.Ratios)-DriftWindowSize:]...)
	}
	return d.Drifted() >= DriftCount
}

// Drifted counts the window's cold starts over DriftThreshold.
func (d *DriftWindow) Drifted() int {
	n := 0
	for _, r := range d.Ratios {
		if r > DriftThreshold {
			n++
		}
	}
	return n
}
