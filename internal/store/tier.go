package store

import (
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// tier is what differs between the store's media (tmpfs and fs-DAX files,
// hugetlbfs files, a device-DAX device). Open picks one; nothing else
// branches on the medium.
type tier interface {
	// put copies memPath in as id, hashing it; nothing stays on failure.
	put(id, memPath string, want snapshot.FileInfo) (*Entry, error)
	get(id string) (*Entry, error)
	remove(id string) error
	// info fills capacity, free and reserved space, and the entries.
	info(in *Info) error
	// regions are a copy's data regions, in 4 KiB pages.
	regions(e *Entry) ([]memlayout.PageRun, error)
	// verify re-hashes a copy unless this process verified it already.
	verify(e *Entry) error
	// mapping is how VM owner maps the copy e.
	mapping(e *Entry, owner string) (*Mapping, error)
	// owners are the VMs holding live private ranges.
	owners() []string
	close() error
}

// Mapping is how a restored VM maps a stored copy: the layout entries the
// interposer maps (with MADV_POPULATE before the vCPU runs), the file QEMU
// opens and what the VM holds of the store privately.
type Mapping struct {
	// File is what QEMU opens as guest RAM; "" for the snapshot's own
	// memory file (a device layout replaces all of QEMU's mapping).
	File string
	// Device, if set, is mapped shared by the device entries.
	Device string
	// Align is the alignment guest RAM must start on (0: the page size).
	Align   int64
	Entries []memlayout.ShimEntry
	// PrivateBytes is store memory the VM holds privately (a device range
	// filled from the copy in FillMS); zero on file tiers, whose copy is
	// mapped private and shared by every clone.
	PrivateBytes int64
	FillMS       float64
	// Release gives back what the VM holds, once its process has exited;
	// nil when it holds nothing.
	Release func()
}

// fileMapping maps runs of the copy at path private, file offset = guest
// offset.
func fileMapping(path string, runs []memlayout.PageRun) *Mapping {
	m := &Mapping{File: path}
	for _, r := range runs {
		m.Entries = append(m.Entries, memlayout.ShimEntry{GuestOff: r.Offset(), Length: r.Bytes(),
			FileOff: r.Offset(), Kind: memlayout.ShimMemoryFile})
	}
	return m
}
