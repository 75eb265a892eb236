package restore

import (
	"context"

	"github.com/thaw-dev/thaw/internal/vmm"
)

// Vanilla maps the snapshot's memory file private and copy-on-write, the
// equivalent of Firecracker's File memory backend: the host kernel pages
// guest memory in on demand (with its readahead); the file is never
// modified, so any number of VMs restore from it at once. From a memory
// source, every page is served through userfaultfd as the guest faults it.
const Vanilla Kind = "vanilla"

type vanilla struct {
	sessionBase
	snap     Snapshot
	fallback string
}

func beginVanilla(snap Snapshot, env Env, fallback string) (Session, error) {
	if snap.Source != nil {
		return startUffd(snap, env, uffdPlan{kind: Vanilla, source: newPageSource(snap.Source), fallback: fallback})
	}
	return &vanilla{sessionBase: base(env), snap: snap, fallback: fallback}, nil
}

func (v *vanilla) Kind() Kind { return Vanilla }
func (v *vanilla) Memory() vmm.Memory {
	return v.protected(vmm.Memory{Path: v.snap.MemoryPath(), Shared: false})
}
func (v *vanilla) Stats() Stats { return Stats{Fallback: v.fallback} }

var vanillaStrategy = Strategy{Kind: Vanilla, Begin: func(_ context.Context, snap Snapshot, env Env) (Session, error) {
	return beginVanilla(snap, env, "")
}, Lazy: true, Auto: true, AutoOrder: 5}
