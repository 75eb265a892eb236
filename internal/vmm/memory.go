package vmm

import (
	"errors"
	"fmt"
)

// Memory says where guest RAM lives and how a restore backs it, in terms
// of no particular monitor: each backend turns it into its own settings
// (QEMU's interposer environment, a Firecracker memory backend, ...).
type Memory struct {
	// Path is the file that backs guest RAM.
	Path string
	// Shared maps the file MAP_SHARED, so guest writes reach it (used while
	// booting, so a snapshot can read RAM from it). When false the file is
	// mapped MAP_PRIVATE: copy-on-write, the file is never modified, and many
	// VMs can restore from one file at once.
	Shared bool
	// Align, if not 0, places guest RAM at a host address aligned to it
	// (bytes, a power of two): premap on device-DAX maps the device into
	// guest RAM, and the kernel maps a DAX device only on its alignment.
	Align int64
	// Backing is how guest pages get their contents; the zero value maps
	// Path whole.
	Backing Backing
	// File says how the VM may treat Path.
	File FileUse
}

// BackingKind is how guest memory gets its contents.
type BackingKind uint8

const (
	// BackedByFile maps the memory file whole.
	BackedByFile BackingKind = iota
	// BackedByUffd leaves guest memory empty: the daemon serves each page
	// on its first fault through a userfaultfd the VMM hands it.
	BackedByUffd
	// BackedByLayout maps a Layout: ranges of files over zero memory.
	BackedByLayout
)

func (k BackingKind) String() string {
	switch k {
	case BackedByFile:
		return "file"
	case BackedByUffd:
		return "uffd"
	case BackedByLayout:
		return "layout"
	}
	return fmt.Sprintf("backing(%d)", uint8(k))
}

// Backing is how guest memory gets its contents.
type Backing struct {
	Kind BackingKind
	// UffdSocket (BackedByUffd) is the daemon's Unix socket that receives
	// the userfaultfd of guest memory, with the memory's address.
	UffdSocket string
	// Layout (BackedByLayout) is what each range of guest memory maps.
	Layout *Layout
}

// Source is what backs one range of a Layout.
type Source uint8

// Range sources.
const (
	SourceZero       Source = iota // anonymous zero pages (FileOff 0)
	SourceMemoryFile               // Memory.Path
	SourceLoadingSet               // Layout.LoadingSet
	SourceDevice                   // Layout.Device, mapped shared
)

// Range is Length bytes of guest memory from GuestOff backed by its
// Source from FileOff. Every field is a multiple of the page size.
type Range struct {
	GuestOff, Length, FileOff uint64
	Source                    Source
}

// PageSize is the granule of a Layout.
const PageSize = 4096

// Layout is guest memory as ranges: all Size bytes start as zero pages,
// then each range maps its source on top, in order (a later range covers
// an earlier one).
type Layout struct {
	Size   uint64
	Ranges []Range
	// LoadingSet is the file SourceLoadingSet ranges map ("" if none do).
	LoadingSet string
	// Device is the device SourceDevice ranges map ("" if none do).
	Device string
	// Populate faults every page in before the guest runs.
	Populate bool
	// Stats, with Populate, is a file the backend writes what populating
	// took to (docs/shim-layout.md's statistics line).
	Stats string
}

// FileUse says how the VM may treat the memory file.
type FileUse struct {
	// KeepIntact: the VM never changes the file, even where the guest
	// reports pages free (the monitor would punch holes into it): every
	// clone restoring from it sees the same bytes.
	KeepIntact bool
	// PunchFreed, with KeepIntact, lets pages the guest reports free become
	// holes in the file: a record VM's own copy, where they must read as
	// zero.
	PunchFreed bool
	// HugePages keeps the monitor's huge-page hint on the file's mapping
	// (each major fault then reads about 4 MiB); false drops it where the
	// backend can.
	HugePages bool
	// NoReadahead: a fault reads only its own page, so the page cache holds
	// what the guest touched (a record VM).
	NoReadahead bool
}

// ErrBadLayout: a layout range is misaligned, outside guest memory or has
// no source file.
var ErrBadLayout = errors.New("bad memory layout")

// problems are what is wrong with m for guest memory of size bytes.
func (m Memory) problems(size int64) []error {
	var errs []error
	if m.Path == "" {
		errs = append(errs, errors.New("missing memory file"))
	}
	if a := m.Align; a < 0 || a&(a-1) != 0 {
		errs = append(errs, fmt.Errorf("memory alignment %d is not a power of two", a))
	}
	switch b := m.Backing; b.Kind {
	case BackedByFile:
		if b.UffdSocket != "" || b.Layout != nil {
			errs = append(errs, errors.New("memory backed by its file names a userfaultfd socket or a layout"))
		}
	case BackedByUffd:
		if b.UffdSocket == "" || m.Shared {
			errs = append(errs, errors.New("userfaultfd-backed memory needs a socket and a private mapping"))
		}
	case BackedByLayout:
		if b.Layout == nil {
			errs = append(errs, fmt.Errorf("%w: layout-backed memory without a layout", ErrBadLayout))
		} else if err := b.Layout.Validate(); err != nil {
			errs = append(errs, err)
		} else if b.Layout.Size != uint64(size) && size > 0 {
			errs = append(errs, fmt.Errorf("%w: layout of %d bytes for guest memory of %d", ErrBadLayout, b.Layout.Size, size))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown memory backing %s", b.Kind))
	}
	if m.File.PunchFreed && !m.File.KeepIntact {
		errs = append(errs, errors.New("punching freed pages is a setting of a memory file kept intact"))
	}
	return errs
}

// Validate checks the layout's ranges: page-aligned, non-empty, inside
// Size, zero ranges at file offset 0, and a file for every source used.
func (l *Layout) Validate() error {
	if l.Size == 0 || l.Size%PageSize != 0 {
		return fmt.Errorf("%w: size %d is not a positive multiple of %d", ErrBadLayout, l.Size, PageSize)
	}
	for i, r := range l.Ranges {
		switch {
		case r.GuestOff%PageSize != 0 || r.Length%PageSize != 0 || r.FileOff%PageSize != 0:
			return fmt.Errorf("%w: range %d is not page-aligned", ErrBadLayout, i)
		case r.Length == 0 || r.Length > l.Size || r.GuestOff > l.Size-r.Length:
			return fmt.Errorf("%w: range %d [%d,+%d) is empty or outside memory of %d bytes", ErrBadLayout, i, r.GuestOff, r.Length, l.Size)
		case r.Source > SourceDevice:
			return fmt.Errorf("%w: range %d has source %d", ErrBadLayout, i, r.Source)
		case r.Source == SourceZero && r.FileOff != 0:
			return fmt.Errorf("%w: zero range %d has file offset %d", ErrBadLayout, i, r.FileOff)
		case r.FileOff > 1<<63-1-r.Length:
			return fmt.Errorf("%w: range %d file range overflows", ErrBadLayout, i)
		case r.Source == SourceLoadingSet && l.LoadingSet == "", r.Source == SourceDevice && l.Device == "":
			return fmt.Errorf("%w: range %d maps a file the layout does not name", ErrBadLayout, i)
		}
	}
	if l.Stats != "" && !l.Populate {
		return fmt.Errorf("%w: populate statistics without populating", ErrBadLayout)
	}
	return nil
}
