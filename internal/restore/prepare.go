package restore

import (
	"context"
	"log/slog"
)

// RecordHost is what a strategy's prepare step may ask of the daemon: a VM
// restored from a snapshot, its memory backed as the step's own session
// says.
type RecordHost interface {
	Restore(ctx context.Context, snap Snapshot, begin BeginFunc) (RecordVM, error)
}

// RecordVM is a VM restored for a prepare step.
type RecordVM interface {
	// Invoke runs the prepare's record input once; an error if it could
	// not run or the function raised.
	Invoke(ctx context.Context) error
	// Snapshot takes a snapshot of the VM (the warm snapshot).
	Snapshot(ctx context.Context) (Snapshot, error)
	// Close deletes the VM.
	Close()
}

// RecordOptions tune the prepare steps.
type RecordOptions struct {
	GroupSize     int    // FaaSnap working-set group size in pages
	MergeGap      int    // FaaSnap region merge threshold in pages
	SnapBPFObject string // SnapBPF's eBPF capture program
}

// Prepare is a prepare in progress, handed from one strategy's step to the
// next: what it starts from, what earlier steps made, and what every step
// reports.
type Prepare struct {
	Clean   Snapshot // the snapshot of the booted VM
	Warm    Snapshot // taken by the Warm strategy's step; zero before it
	Options RecordOptions
	Log     *slog.Logger
	// Touched are the pages the guest itself touched during the record
	// invocation (REAP's recording), for steps that compare with them;
	// nil until recorded.
	Touched []uint64
	Builds  Builds
	Timing  RecordTiming
}

// Builds are what prepare's steps built, one part a strategy.
type Builds struct {
	FaaSnap *FaaSnapBuild `json:"faasnap"`
	REAP    *REAPBuild    `json:"reap"`
	SnapBPF *SnapBPFBuild `json:"snapbpf,omitempty"`
	// SnapBPFUnavailable says why this host cannot capture for snapbpf
	// (no tracefs, BTF, capabilities or capture program); everything else
	// is prepared, and snapbpf restores of the snapshot run as vanilla.
	SnapBPFUnavailable string `json:"snapbpf_unavailable,omitempty"`
}

// RecordTiming says where the steps' time went, in milliseconds.
type RecordTiming struct {
	FaaSnapRecordMS float64 `json:"faasnap_record_ms"`
	WarmSnapshotMS  float64 `json:"warm_snapshot_ms"`
	FaaSnapBuildMS  float64 `json:"faasnap_build_ms"`
	REAPRecordMS    float64 `json:"reap_record_ms"`
	REAPBuildMS     float64 `json:"reap_build_ms"`
	SnapBPFRecordMS float64 `json:"snapbpf_record_ms"`
	SnapBPFBuildMS  float64 `json:"snapbpf_build_ms"`
}

// shimmed is begin, refused when the interposer every restored VMM
// preloads is missing (what Strategy.Start checks for restores).
func shimmed(begin BeginFunc) BeginFunc {
	return func(ctx context.Context, snap Snapshot, env Env) (Session, error) {
		if err := needShim(env); err != nil {
			return nil, err
		}
		return begin(ctx, snap, env)
	}
}
