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

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/snapshot"
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
	StoreBytes     uint64  `json:"store_bytes,omitempty"`     // the store copy mapped (shared by every clone)
	PopulatedBytes uint64  `json:"populated_bytes,omitempty"` // guest memory pre-faulted before the vCPU ran
	PopulateMS     float64 `json:"populate_ms,omitempty"`     // time to pre-fault it (part of set-up)
	// On device-DAX: the VM's own range of the device (persistent memory
	// it holds privately, a copy's size) and the time to fill it from the
	// stored copy (part of set-up).
	DeviceBytes uint64  `json:"device_bytes,omitempty"`
	CloneCopyMS float64 `json:"clone_copy_ms,omitempty"`
}

// premap restores from the snapshot memory store with every guest page
// mapped before the vCPU runs (PASS, seed 001):
//   - §3 (persistent memory as the snapshot medium): the memory file's copy
//     lives in the store (tmpfs, hugetlbfs, or a DAX filesystem on
//     persistent memory) and is mapped, never read into a buffer or copied;
//   - §4 (complete address indexing): the interposer maps all of guest
//     memory - non-zero regions private from the store copy, zero regions
//     anonymous - and pre-faults every page read-only (MADV_POPULATE_READ)
//     before QEMU continues, so the guest takes no fault for a snapshot
//     page; its writes copy-on-write into private memory of the VM.
//
// Where thaw differs: PASS builds its own page tables from a persistent
// index inside a modified hypervisor; thaw asks Linux to populate the page
// tables of an unmodified QEMU from the store file, so "pre-faulted" costs a
// populate pass over the mapping at every restore (reported as PopulateMS,
// part of set-up). Zero regions map the shared zero page instead of store
// memory, so the store holds only non-zero pages. On the file tiers
// (tmpfs, hugetlbfs, fs-DAX) thaw maps one copy private into every clone,
// where PASS gives each VM its own range of a devdax device. On hugetlbfs
// the regions are whole huge pages and QEMU, seeing its backing file there,
// aligns guest RAM to the huge page size so they map as such; copy-on-write
// then copies a whole huge page into the clone.
//
// On device-DAX thaw does what PASS does (§4 "PMEM Address Management"),
// because the kernel maps a DAX device only shared: the VM gets a range of
// the device of its own (store.Clone), filled from the stored copy with one
// memcpy on the device, and the interposer maps that range shared into
// guest RAM (QEMU is told align=<the device's alignment> so the mapping can
// start on it) and pre-faults it writable. The guest then writes into
// persistent memory, nothing is copied on write; the range returns to the
// store when QEMU has exited.
type premap struct {
	sessionBase
	snap   Snapshot
	entry  *store.Entry
	layout string
	stats  string
	ents   int

	// device-DAX only.
	st    *store.Store
	clone *store.Clone
	pid   int
	close sync.Once
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
	// The copy was hashed when it was stored; re-hash it once per daemon
	// and whenever its stamp changes (device stores: once per daemon).
	if env.Store.Kind() == store.DevDAX {
		if err := env.Store.VerifyCopy(e); err != nil {
			return nil, err
		}
	} else if err := verifyArtifact(e.Path, func(full bool) error {
		if !full {
			return nil
		}
		fi, err := snapshot.HashFile(e.Path)
		if err != nil {
			return err
		}
		if fi.SHA256 != memSHA(snap) {
			return fmt.Errorf("the store's copy of %s is damaged (sha256 %.12s, want %.12s)", snap.Manifest.ID, fi.SHA256, memSHA(snap))
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if env.Store.Kind() == store.DevDAX {
		return beginPremapDevice(snap, env, e)
	}
	regions, err := env.Store.Regions(e)
	if err != nil {
		return nil, err
	}
	if env.Store.Kind() == store.HugeTLBFS {
		// QEMU's private mapping of the copy reserves a huge page for
		// every mapped huge page (for its copy-on-writes); without them
		// the mapping fails inside QEMU. Say so here, where premap can
		// still fall back.
		in, err := env.Store.Info()
		if err != nil {
			return nil, err
		}
		if in.FreeBytes < e.Bytes {
			return nil, fmt.Errorf("the huge page pool has %d MiB unreserved, a premap clone of %s reserves %d MiB for copy-on-write (raise vm.nr_hugepages)",
				in.FreeBytes>>20, snap.Manifest.ID, e.Bytes>>20)
		}
	}
	t := memlayout.ShimTable{MemSize: uint64(e.Size)}
	for _, r := range regions {
		t.Entries = append(t.Entries, memlayout.ShimEntry{GuestOff: r.Offset(), Length: r.Bytes(),
			FileOff: r.Offset(), Kind: memlayout.ShimMemoryFile})
	}
	b, err := t.Encode()
	if err != nil {
		return nil, err
	}
	p := &premap{snap: snap, entry: e, ents: len(t.Entries),
		layout: filepath.Join(env.RunDir, "layout.bin"), stats: filepath.Join(env.RunDir, "populate.stats")}
	if err := os.WriteFile(p.layout, b, 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// beginPremapDevice takes a range of the device for this VM, filled with
// the snapshot's stored units, and lays guest memory out over it.
func beginPremapDevice(snap Snapshot, env Env, e *store.Entry) (Session, error) {
	if env.VMID == "" {
		return nil, errors.New("premap on a device store needs the VM's id")
	}
	c, err := env.Store.Clone(snap.Manifest.ID, env.VMID)
	if err != nil {
		return nil, err
	}
	t := memlayout.ShimTable{MemSize: uint64(e.Size)}
	for _, m := range c.Maps {
		t.Entries = append(t.Entries, memlayout.ShimEntry{GuestOff: m.GuestOff, Length: m.Length,
			FileOff: m.DeviceOff, Kind: memlayout.ShimDevice})
	}
	p := &premap{snap: snap, entry: e, ents: len(t.Entries), st: env.Store, clone: c,
		layout: filepath.Join(env.RunDir, "layout.bin"), stats: filepath.Join(env.RunDir, "populate.stats")}
	b, err := t.Encode()
	if err == nil {
		err = os.WriteFile(p.layout, b, 0o600)
	}
	if err != nil {
		env.Store.Release(env.VMID)
		return nil, err
	}
	return p, nil
}

func (p *premap) Kind() Kind { return Premap }

// Memory points QEMU at the store's copy: QEMU opens it, the interposer
// replaces QEMU's mapping of it with the populated layout. On a device
// store QEMU opens the snapshot's memory file (the layout replaces all of
// its mapping) and places guest RAM on the device's alignment.
func (p *premap) Memory() vmm.Memory {
	if p.clone != nil {
		mem := p.snap.MemoryPath()
		return protected(vmm.Memory{Path: mem, Shared: false, Align: p.st.PageSize(), Interposer: vmm.Interposer{
			Mode: vmm.ModeLayout, MemFile: mem, Layout: p.layout, Device: p.clone.Device, Populate: true, Stats: p.stats}})
	}
	return protected(vmm.Memory{Path: p.entry.Path, Shared: false, Interposer: vmm.Interposer{
		Mode: vmm.ModeLayout, MemFile: p.entry.Path, Layout: p.layout, Populate: true, Stats: p.stats}})
}

func (p *premap) Started(_ context.Context, pid int) error { p.pid = pid; return nil }

// Close gives a device store's clone range back once QEMU is gone: while
// the process exists, the range is mapped into it and another VM must not
// get it. A process that outlived the daemon's SIGKILL keeps its range
// until the daemon restarts (the store forgets clone ranges then).
func (p *premap) Close() error {
	if p.clone == nil {
		return nil
	}
	var err error
	p.close.Do(func() {
		if p.pid > 0 {
			if !procstat.Exited(p.pid) {
				err = fmt.Errorf("premap: qemu (pid %d) still runs; its %d MiB range of %s stays allocated", p.pid, p.clone.Bytes>>20, p.clone.Device)
				return
			}
		}
		p.st.Release(p.clone.Owner)
	})
	return err
}

func (p *premap) Stats() Stats {
	ps := &PremapStats{StoreBytes: uint64(p.entry.Bytes)}
	st := Stats{LayoutEntries: p.ents, PremapStats: ps}
	if p.clone != nil {
		ps.DeviceBytes, ps.CloneCopyMS = uint64(p.clone.Bytes), p.clone.CopyMS
	}
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
	return st
}
