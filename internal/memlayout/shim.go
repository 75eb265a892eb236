package memlayout

import (
	"encoding/binary"
	"fmt"
	"math"
)

// The layout table of docs/shim-layout.md ("layout" mode of the QEMU
// interposer shim/libthaw_shim.so), little-endian.
const (
	ShimMagic      = "THAWLAY1"
	ShimVersion    = 1
	ShimHeaderSize = 32
	ShimEntrySize  = 32
)

// ShimKind says what backs a layout entry.
type ShimKind uint32

// Layout entry kinds.
const (
	ShimAnonymous  ShimKind = 0 // anonymous private memory, file_off 0
	ShimMemoryFile ShimKind = 1 // THAW_SHIM_MEMFILE, the snapshot memory file
	ShimLoadingSet ShimKind = 2 // THAW_SHIM_LSFILE, the loading-set file
	ShimDevice     ShimKind = 3 // THAW_SHIM_DEVICE, mapped shared: the VM's range of a device-DAX store
)

// ShimEntry is one mapping of the table, in bytes: Length bytes of guest
// memory from GuestOff map the backing file of Kind from FileOff.
type ShimEntry struct {
	GuestOff, Length, FileOff uint64
	Kind                      ShimKind
}

// ShimTable is a decoded layout table. The shim maps all MemSize bytes
// anonymous first, then each entry on top, in order.
type ShimTable struct {
	MemSize uint64
	Entries []ShimEntry
}

// check applies the rules of docs/shim-layout.md, plus two the document
// implies: mem_size is a positive multiple of the page size (it is the
// length of QEMU's mmap) and file_off+length fits in an off_t.
func (t *ShimTable) check() error {
	ps := PageSize
	if t.MemSize == 0 || t.MemSize%ps != 0 {
		return fmt.Errorf("%w: layout mem_size %d is not a positive multiple of %d", ErrCorrupt, t.MemSize, ps)
	}
	if uint64(len(t.Entries)) > math.MaxUint32 {
		return fmt.Errorf("%w: layout has %d entries", ErrCorrupt, len(t.Entries))
	}
	for i, e := range t.Entries {
		switch {
		case e.GuestOff%ps != 0 || e.Length%ps != 0 || e.FileOff%ps != 0:
			return fmt.Errorf("%w: layout entry %d is not page-aligned", ErrCorrupt, i)
		case e.Length == 0 || e.Length > t.MemSize || e.GuestOff > t.MemSize-e.Length:
			return fmt.Errorf("%w: layout entry %d [%d,+%d) is empty or outside memory of %d bytes", ErrCorrupt, i, e.GuestOff, e.Length, t.MemSize)
		case e.Kind > ShimDevice:
			return fmt.Errorf("%w: layout entry %d has kind %d", ErrCorrupt, i, e.Kind)
		case e.Kind == ShimAnonymous && e.FileOff != 0:
			return fmt.Errorf("%w: anonymous layout entry %d has file_off %d", ErrCorrupt, i, e.FileOff)
		case e.FileOff > math.MaxInt64-e.Length:
			return fmt.Errorf("%w: layout entry %d file range overflows", ErrCorrupt, i)
		}
	}
	return nil
}

// Encode returns the binary table, after checking it. The format is thaw's
// (docs/shim-layout.md); FaaSnap passed the regions to its modified
// Firecracker through the VMM API (§5).
func (t *ShimTable) Encode() ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	b := make([]byte, 0, ShimHeaderSize+ShimEntrySize*len(t.Entries))
	b = append(b, ShimMagic...)
	b = binary.LittleEndian.AppendUint32(b, ShimVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(t.Entries)))
	b = binary.LittleEndian.AppendUint64(b, t.MemSize)
	b = binary.LittleEndian.AppendUint64(b, 0)
	for _, e := range t.Entries {
		b = binary.LittleEndian.AppendUint64(b, e.GuestOff)
		b = binary.LittleEndian.AppendUint64(b, e.Length)
		b = binary.LittleEndian.AppendUint64(b, e.FileOff)
		b = binary.LittleEndian.AppendUint32(b, uint32(e.Kind))
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	return b, nil
}

// DecodeShimLayout parses and checks a binary layout table (thaw's format
// for FaaSnap §4.5/Figure 4 layouts, docs/shim-layout.md) the way the shim
// must: magic, version 1, reserved fields zero, exact length for count
// entries, and every entry valid (see ShimTable.check). Errors wrap
// ErrCorrupt.
func DecodeShimLayout(b []byte) (*ShimTable, error) {
	if len(b) < ShimHeaderSize {
		return nil, fmt.Errorf("%w: layout of %d bytes is shorter than its header", ErrCorrupt, len(b))
	}
	le := binary.LittleEndian
	if string(b[:8]) != ShimMagic {
		return nil, fmt.Errorf("%w: layout magic %q", ErrCorrupt, b[:8])
	}
	if v := le.Uint32(b[8:]); v != ShimVersion {
		return nil, fmt.Errorf("%w: layout version %d, want %d", ErrCorrupt, v, ShimVersion)
	}
	count := uint64(le.Uint32(b[12:]))
	if le.Uint64(b[24:]) != 0 {
		return nil, fmt.Errorf("%w: layout header reserved field is not zero", ErrCorrupt)
	}
	if uint64(len(b)) != ShimHeaderSize+count*ShimEntrySize {
		return nil, fmt.Errorf("%w: layout is %d bytes, %d entries need %d", ErrCorrupt, len(b), count, ShimHeaderSize+count*ShimEntrySize)
	}
	t := &ShimTable{MemSize: le.Uint64(b[16:]), Entries: make([]ShimEntry, count)}
	for i := range t.Entries {
		e := b[ShimHeaderSize+i*ShimEntrySize:][:ShimEntrySize]
		if le.Uint32(e[28:]) != 0 {
			return nil, fmt.Errorf("%w: layout entry %d reserved field is not zero", ErrCorrupt, i)
		}
		t.Entries[i] = ShimEntry{GuestOff: le.Uint64(e), Length: le.Uint64(e[8:]), FileOff: le.Uint64(e[16:]), Kind: ShimKind(le.Uint32(e[24:]))}
	}
	if err := t.check(); err != nil {
		return nil, err
	}
	return t, nil
}

// ShimTable returns the FaaSnap layout: the anonymous base is implicit (the
// shim maps the whole range anonymous first), then one memory-file entry
// (file_off = guest_off) per non-zero region, then one loading-set entry per
// loading region at its FileOff, in manifest order. The memory size must be
// a multiple of the page size (QEMU's always is; the table cannot express a
// partial page).
//
// FaaSnap §4.5 and Figure 4 (overlapping mmaps: "First, an anonymous region
// for the entire guest address space is mapped. Then non-zero regions are
// mapped to the same offset in the memory file. Finally, the loading set
// regions are mapped to pre-recorded offsets in the loading set file"). thaw
// differs in doing the mapping inside QEMU through an LD_PRELOAD interposer
// that replaces QEMU's single mmap of the memory backend, instead of a
// modified VMM; QEMU never knows.
func (a *FaaSnapArtifact) ShimTable() (*ShimTable, error) {
	if a.Memory.Size <= 0 || uint64(a.Memory.Size)%PageSize != 0 {
		return nil, fmt.Errorf("memory size %d is not a positive multiple of the page size %d: the shim cannot map it", a.Memory.Size, PageSize)
	}
	t := &ShimTable{MemSize: uint64(a.Memory.Size), Entries: make([]ShimEntry, 0, len(a.NonzeroRegions)+len(a.LoadingRegions))}
	for _, r := range a.NonzeroRegions {
		t.Entries = append(t.Entries, ShimEntry{GuestOff: r.Offset(), Length: r.Bytes(), FileOff: r.Offset(), Kind: ShimMemoryFile})
	}
	for _, l := range a.LoadingRegions {
		r := l.PageRun()
		t.Entries = append(t.Entries, ShimEntry{GuestOff: r.Offset(), Length: r.Bytes(), FileOff: l.FileOff, Kind: ShimLoadingSet})
	}
	return t, nil
}

// MemoryFileLayout is the encoded layout without the loading-set entries:
// per-region mapping (§4.5) with the loading set left in the memory file,
// no loading-set file (§4.7 off, Figure 9's step "per-region mapping").
func (a *FaaSnapArtifact) MemoryFileLayout() ([]byte, error) {
	t, err := a.ShimTable()
	if err != nil {
		return nil, err
	}
	t.Entries = t.Entries[:len(a.NonzeroRegions)]
	return t.Encode()
}

// ShimLayout is the binary encoding of ShimTable, the file THAW_SHIM_LAYOUT
// names (FaaSnap §4.5/Figure 4, see ShimTable for where thaw differs).
func (a *FaaSnapArtifact) ShimLayout() ([]byte, error) {
	t, err := a.ShimTable()
	if err != nil {
		return nil, err
	}
	return t.Encode()
}
