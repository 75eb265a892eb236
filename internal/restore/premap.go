package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Premap maps the whole guest memory from the snapshot memory store (tmpfs,
// hugetlbfs or persistent memory) and pre-faults every page before the
// vCPU runs (PASS): no page faults for snapshot pages, nothing read, one
// stored copy shared by all clones.
const Premap Kind = "premap"

// PremapStats: the store copy mapped and the pre-fault pass.
type PremapStats struct {
	StoreBytes     uint64  `json:"store_bytes,omitempty" unit:"bytes" desc:"the store copy mapped (shared by every clone)"`
	PopulatedBytes uint64  `json:"populated_bytes,omitempty" unit:"bytes" desc:"guest memory pre-faulted before the vCPU ran"`
	PopulateMS     float64 `json:"populate_ms,omitempty" unit:"ms" desc:"pre-faulting it (part of set-up)"`
	// On device-DAX: the VM's own range of the device (a copy's size) and
	// the time to fill it from the stored copy (part of set-up).
	DeviceBytes uint64  `json:"device_bytes,omitempty" unit:"bytes" desc:"the VM's own range of the device"`
	CloneCopyMS float64 `json:"clone_copy_ms,omitempty" unit:"ms" desc:"filling it from the stored copy (part of set-up)"`
}

// premap lays guest memory out over the store: non-zero regions from the
// store's mapping (a private mapping of one shared copy on file tiers, a
// VM's own range on a device), zero regions anonymous, every page
// pre-faulted by the interposer before QEMU continues. Where thaw differs
// from PASS (page tables populated by Linux for an unmodified QEMU, zero
// regions not stored): docs/design.md, premap.
type premap struct {
	sessionBase
	snap   Snapshot
	entry  *store.Entry
	m      *store.Mapping
	layout *vmm.Layout
	stats  string
	pid    int
	close  sync.Once
}

func beginPremap(_ context.Context, snap Snapshot, env Env) (Session, error) {
	if env.Store == nil {
		return nil, errors.New("no snapshot memory store is configured")
	}
	e, err := env.Store.Get(snap.Manifest.ID)
	if err != nil {
		return nil, fmt.Errorf("%w (store it with `thaw snapshot store %s`)", err, snap.Manifest.ID)
	}
	if e.Size != memSize(snap) || e.SHA256 != memSHA(snap) {
		return nil, fmt.Errorf("the store's copy of %s describes another memory file", snap.Manifest.ID)
	}
	// The copy was hashed when it was stored; the tier re-hashes it once
	// per daemon (and on file tiers whenever its stamp changes).
	if err := env.Store.Verify(e); err != nil {
		return nil, err
	}
	m, err := env.Store.Map(e, env.VMID)
	if err != nil {
		return nil, err
	}
	p := &premap{sessionBase: base(env), snap: snap, entry: e, m: m, stats: filepath.Join(env.RunDir, "populate.stats")}
	p.layout, err = layoutOf(uint64(e.Size), m.Entries, "", m.Device)
	if err != nil {
		if m.Release != nil {
			m.Release()
		}
		return nil, err
	}
	return p, nil
}

func (p *premap) Kind() Kind { return Premap }

// Memory points QEMU at the store's copy (or, where the layout replaces
// all of QEMU's mapping, the snapshot's memory file): the interposer
// replaces QEMU's mapping of it with the populated layout.
func (p *premap) Memory() vmm.Memory {
	path := p.m.File
	if path == "" {
		path = p.snap.MemoryPath()
	}
	l := *p.layout
	l.Populate, l.Stats = true, p.stats
	return p.protected(vmm.Memory{Path: path, Shared: false, Align: p.m.Align, Backing: vmm.Backing{Kind: vmm.BackedByLayout, Layout: &l}})
}

func (p *premap) Started(_ context.Context, pid int) error { p.pid = pid; return nil }

// Close gives back what the VM holds of the store (a device range) once
// QEMU is gone: while the process exists, it maps it and another VM must
// not get it. A process that outlived the daemon's SIGKILL keeps it until
// the daemon restarts (the store forgets clone ranges then).
func (p *premap) Close() error {
	if p.m.Release == nil {
		return nil
	}
	var err error
	p.close.Do(func() {
		if p.pid > 0 && !procstat.Exited(p.pid) {
			err = fmt.Errorf("premap: qemu (pid %d) still runs; its %d MiB of %s stays allocated", p.pid, p.m.PrivateBytes>>20, p.m.Device)
			return
		}
		p.m.Release()
	})
	return err
}

func (p *premap) Stats() Stats {
	ps := PremapStats{StoreBytes: uint64(p.entry.Bytes), DeviceBytes: uint64(p.m.PrivateBytes), CloneCopyMS: p.m.FillMS}
	if b, err := os.ReadFile(p.stats); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "populate_us":
				ps.PopulateMS = float64(n) / 1000
			case "bytes":
				ps.PopulatedBytes = n
			}
		}
	}
	return withPart(Stats{LayoutEntries: len(p.m.Entries), FetchMS: ps.CloneCopyMS + ps.PopulateMS, FetchBytes: ps.StoreBytes}, Premap, ps)
}

var premapStrategy = Strategy{Kind: Premap, Begin: beginPremap, Fallback: true, Auto: true, AutoOrder: 4, Ready: storedCopy, UsesStore: true,
	StatsPart: PremapStats{}}
