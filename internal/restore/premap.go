package restore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
)

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
// memory, so the store holds only non-zero pages. PASS maps devdax with
// each VM in its own range; thaw maps one copy private into every clone
// (device-DAX cannot be mapped private, so it is not a store tier). On
// hugetlbfs the regions are whole huge pages and QEMU, seeing its backing
// file there, aligns guest RAM to the huge page size so they map as such;
// copy-on-write then copies a whole huge page into the clone.
type premap struct {
	snap   Snapshot
	entry  *store.Entry
	shim   string
	layout string
	stats  string
	ents   int
}

func beginPremap(_ context.Context, snap Snapshot, env Env) (Session, error) {
	if env.Store == nil {
		return nil, errors.New("no snapshot memory store is configured")
	}
	if env.ShimPath == "" {
		return nil, errors.New("the memory-layout interposer (libthaw_shim.so) is not available")
	}
	if _, err := os.Stat(env.ShimPath); err != nil {
		return nil, fmt.Errorf("interposer: %w", err)
	}
	e, err := env.Store.Get(snap.Manifest.ID)
	if err != nil {
		return nil, fmt.Errorf("%w (store it with `thaw snapshot store %s`)", err, snap.Manifest.ID)
	}
	if e.Size != memSize(snap) || e.SHA256 != memSHA(snap) {
		return nil, fmt.Errorf("the store's copy of %s describes another memory file", snap.Manifest.ID)
	}
	// The copy was hashed when it was stored; re-hash it once per daemon
	// and whenever its stamp changes.
	if err := verifyArtifact(e.Path, func(full bool) error {
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
	p := &premap{snap: snap, entry: e, shim: env.ShimPath, ents: len(t.Entries),
		layout: filepath.Join(env.RunDir, "layout.bin"), stats: filepath.Join(env.RunDir, "populate.stats")}
	if err := os.WriteFile(p.layout, b, 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *premap) Kind() Kind { return Premap }

// Memory points QEMU at the store's copy: QEMU opens it, the interposer
// replaces QEMU's mapping of it with the populated layout.
func (p *premap) Memory() vmm.Memory {
	return vmm.Memory{Path: p.entry.Path, Shared: false, Env: []string{
		"LD_PRELOAD=" + p.shim,
		"THAW_SHIM_MODE=layout",
		"THAW_SHIM_MEMFILE=" + p.entry.Path,
		"THAW_SHIM_LAYOUT=" + p.layout,
		"THAW_SHIM_POPULATE=read",
		"THAW_SHIM_STATS=" + p.stats,
	}}
}

func (p *premap) Started(context.Context, int) error { return nil }
func (p *premap) InvocationDone()                    {}
func (p *premap) Close() error                       { return nil }

func (p *premap) Stats() Stats {
	st := Stats{LayoutEntries: p.ents, StoreBytes: uint64(p.entry.Bytes)}
	if b, err := os.ReadFile(p.stats); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, " ")
			n, _ := strconv.ParseUint(v, 10, 64)
			switch k {
			case "populate_us":
				st.PopulateMS = float64(n) / 1000
			case "bytes":
				st.PopulatedBytes = n
			}
		}
	}
	return st
}
