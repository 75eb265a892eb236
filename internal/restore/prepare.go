package restore

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"

	"github.com/thaw-dev/thaw/wire"
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
	// Variants: also build FaaSnap's technique-off artifacts (ablation).
	Variants bool
}

// Prepare is a prepare in progress, handed from one strategy's step to the
// next: what it starts from, what earlier steps made, and the result every
// step fills its part of (its build and its timing).
type Prepare struct {
	Clean   Snapshot // the snapshot of the booted VM
	Warm    Snapshot // taken by the Warm strategy's step; zero before it
	Options RecordOptions
	Log     *slog.Logger
	// Touched are the pages the guest itself touched during the record
	// invocation (REAP's recording), for steps that compare with them;
	// nil until recorded.
	Touched []uint64
	// Loading is FaaSnap's recorded working set, in order (its Record
	// step's), for its Finish step.
	Loading []uint64
	// Builds are the recording strategies' own summaries of what they
	// built, by kind (Step's Build once sealed; Finish steps still change
	// them).
	Builds map[Kind]any
	Result *wire.PrepareResult
}

// Step is strategy k's part of the prepare's result.
func (p *Prepare) Step(k Kind) *wire.PreparedStrategy {
	if p.Result.Prepared == nil {
		p.Result.Prepared = map[string]*wire.PreparedStrategy{}
	}
	if p.Result.Prepared[string(k)] == nil {
		p.Result.Prepared[string(k)] = &wire.PreparedStrategy{}
	}
	return p.Result.Prepared[string(k)]
}

// SetBuild keeps strategy k's build summary b (a pointer) until Seal.
func (p *Prepare) SetBuild(k Kind, b any) {
	if p.Builds == nil {
		p.Builds = map[Kind]any{}
	}
	p.Builds[k] = b
}

// Seal writes the builds into the result, once every step (Finish
// included) ran.
func (p *Prepare) Seal() error {
	for k, b := range p.Builds {
		j, err := json.Marshal(b)
		if err != nil {
			return fmt.Errorf("%s build: %w", k, err)
		}
		p.Step(k).Build = j
	}
	return nil
}

// localOnly is begin, refused for a snapshot whose memory is not local.
func localOnly(begin BeginFunc) BeginFunc {
	return func(ctx context.Context, snap Snapshot, env Env) (Session, error) {
		if snap.Source != nil { // recording reads and hashes the memory file
			return nil, fmt.Errorf("record on snapshot %s: %w: pull the snapshot first", snapID(snap), ErrNeedsLocalMemory)
		}
		return begin(ctx, snap, env)
	}
}
