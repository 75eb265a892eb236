package restore

import "testing"

// SynthSnapshot is a synthetic snapshot (memory file and every built-in
// strategy's artifacts) for the external tests.
type SynthSnapshot struct {
	Snap  Snapshot
	Order []uint64 // its working set
}

// NewSynthSnapshot builds one of pages pages.
func NewSynthSnapshot(t *testing.T, pages int, seed int64) SynthSnapshot {
	s := newSynth(t, pages, seed)
	return SynthSnapshot{Snap: s.snap, Order: s.order}
}

// WriteArtifacts writes every built-in strategy's artifacts of snap from
// the working set order (the conformance suite's Build).
var WriteArtifacts = writeArtifacts

// LocalOnly is the guard every prepare step's restore goes through.
var LocalOnly = localOnly

// ShimDir builds the interposer and returns its directory.
var ShimDir = shimDir
