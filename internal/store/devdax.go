package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
)

// The device-DAX tier: persistent memory as a character device
// (/dev/daxX.Y), managed by thaw itself as PASS's PMEM Manager does (seed
// 001, §3 "PMEM Space Initialization / Allocation / Reclamation", §4 "PMEM
// Address Management"):
//   - initialization: the whole device is mapped shared once, when the store
//     opens; a persistent index at its start (two slots, written
//     alternately, each checksummed) records where every stored snapshot
//     lives, so copies survive daemon restarts and reboots;
//   - allocation: each stored snapshot gets one contiguous range holding its
//     non-zero units (the device's alignment, 2 MiB by default) packed back
//     to back; each restored VM gets a range of its own (a "clone range"),
//     filled from the snapshot's range when the VM is restored;
//   - reclamation: a clone range returns to the free space when its VM's
//     process has exited; a removed snapshot's range when no clone is being
//     filled from it.
//
// Why a range per VM: the kernel maps a DAX character device only shared
// (drivers/dax/device.c, check_vma: "attempted private mapping"), so
// clones cannot copy-on-write over one copy as on the file tiers. PASS too
// gives every microVM its own range of the device. thaw departs from PASS
// in what goes there: only the snapshot's non-zero units (zero regions of
// guest memory stay anonymous DRAM, mapped to the zero page until written),
// and the range is filled at restore by one memcpy on the device, reported
// as the clone's copy time.
//
// A device file is the same allocator over a fixed-size file: OpenDeviceFile uses
// one on tmpfs to stand in for a device on hosts that have none (tests);
// only the medium differs.

// DevDAX is persistent memory as a device-DAX character device.
const DevDAX Kind = "devdax"

// indexMagic starts each index slot.
const indexMagic = "THAWDAX1"

// indexHeader is the fixed part of an index slot: magic, generation, JSON
// length, SHA-256 of the JSON.
const indexHeader = 8 + 8 + 4 + 4 + 32

// regionIndexBytes is the space reserved for the index at the start of the
// device (rounded up to the device's alignment): two slots of half of it.
const regionIndexBytes = 2 << 20

// daxIndex is the persistent part of a device store.
type daxIndex struct {
	Version    int     `json:"version"` // 1
	DeviceSize int64   `json:"device_size"`
	Align      int64   `json:"align"`
	Entries    []Entry `json:"entries"`
}

// span is a byte range of the device.
type span struct{ off, len int64 }

// Clone is a restored VM's private range of a device store, filled with
// its snapshot's stored units.
type Clone struct {
	Owner    string // the VM
	Snapshot string
	Device   string // the device (or the file standing in for one) to map
	Offset   int64  // of the range on the device
	Bytes    int64
	CopyMS   float64 // filling the range from the stored copy
	// Maps are where guest memory's non-zero units live in the range.
	Maps []CloneMap
}

// CloneMap maps Length bytes of guest memory at GuestOff to the device at
// DeviceOff (both multiples of the device's alignment).
type CloneMap struct {
	GuestOff, Length, DeviceOff uint64
}

// daxDevice is a device (or a file standing in for one) the store allocates.
type daxDevice struct {
	path  string
	f     *os.File
	size  int64
	align int64
	hdr   int64  // bytes reserved for the index
	mem   []byte // the whole device, MAP_SHARED

	mu       sync.Mutex // guards what follows
	gen      uint64     // generation of the newest index slot
	slot     int        // the slot holding it
	idx      daxIndex
	clones   map[string]span // owner -> clone range
	filling  map[string]span // Put in progress: snapshot -> range reserved
	verified map[string]bool // snapshot -> copy hashed by this process
	notice   string          // what load did that the operator should hear of

	// copying is held shared while a clone range is filled from a stored
	// range, and exclusively by Remove before it frees a stored range.
	copying sync.RWMutex
}

// daxSysfs is where the kernel describes character devices; a variable for
// tests.
var daxSysfs = "/sys/dev/char"

// isDAXDevice reports whether path is a device-DAX character device and
// returns its sysfs directory.
func isDAXDevice(path string) (string, bool) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR {
		return "", false
	}
	dir := filepath.Join(daxSysfs, fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)))
	sub, err := filepath.EvalSymlinks(filepath.Join(dir, "subsystem"))
	if err != nil || filepath.Base(sub) != "dax" {
		return "", false
	}
	return dir, true
}

func readSysInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 0, 64)
}

// openDevDAX opens a device-DAX character device as a store: its size and
// alignment come from sysfs (the alignment from the device, or on older
// kernels its nd region, 2 MiB if neither says).
func openDevDAX(path, sysDir string) (*Store, error) {
	size, err := readSysInt(filepath.Join(sysDir, "size"))
	if err != nil {
		return nil, fmt.Errorf("memory store %s: device size: %w", path, err)
	}
	align := int64(2 << 20)
	for _, p := range []string{filepath.Join(sysDir, "align"), filepath.Join(sysDir, "device", "align")} {
		if a, err := readSysInt(p); err == nil && a > 0 {
			align = a
			break
		}
	}
	return openRegion(path, DevDAX, size, align)
}

// DeviceFileAlign is the alignment thawd gives a device file: device-DAX's
// default.
const DeviceFileAlign = 2 << 20

// OpenDeviceFile opens a fixed-size file as a device store with the given
// alignment: the device-DAX tier's allocator, index and clone ranges over
// a file. A file on tmpfs stands in for a device on hosts without one
// (thawd --store-device-file; tests and measurements).
func OpenDeviceFile(path string, align int64) (*Store, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("memory store %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: %s is not a regular file", ErrUnsupported, path)
	}
	return openRegion(path, DevDAX, st.Size, align)
}

func openRegion(path string, kind Kind, size, align int64) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, err
	}
	if align < int64(memlayout.PageSize) || align&(align-1) != 0 {
		return nil, fmt.Errorf("memory store %s: alignment %d is not a power of two of at least 4 KiB", abs, align)
	}
	hdr := roundUp(regionIndexBytes, align)
	if size < hdr+align {
		return nil, fmt.Errorf("memory store %s: %d bytes is too small (the index takes %d, the alignment is %d)", abs, size, hdr, align)
	}
	f, err := os.OpenFile(abs, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("memory store %s: %w", abs, err)
	}
	// One store per device: a second daemon would allocate over the first.
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return nil, fmt.Errorf("memory store %s: in use by another thawd (%v)", abs, err)
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("memory store %s: mapping %d MiB: %w", abs, size>>20, err)
	}
	// PASS's "PMEM Space Initialization": build the mapping of the whole
	// device once, so storing and filling clone ranges later run at
	// memory speed, not fault by fault (a file standing in for a device
	// gets its memory here, as a device has it from the start). Kernels
	// before 5.14 fault it in on first use instead.
	if err := unix.Madvise(mem, 23 /* MADV_POPULATE_WRITE */); err != nil && !errors.Is(err, unix.EINVAL) {
		_ = unix.Munmap(mem)
		f.Close()
		return nil, fmt.Errorf("memory store %s: populating the mapping of %d MiB: %w", abs, size>>20, err)
	}
	r := &daxDevice{path: abs, f: f, size: size, align: align, hdr: hdr, mem: mem,
		clones: map[string]span{}, filling: map[string]span{}, verified: map[string]bool{}}
	if err := r.load(); err != nil {
		_ = unix.Munmap(mem)
		f.Close()
		return nil, fmt.Errorf("memory store %s: %w", abs, err)
	}
	return &Store{dir: abs, kind: kind, pageSize: align, t: r, notice: r.notice}, nil
}

// close unmaps the device and releases it for another store, once no clone
// fill is copying (Store.Close holds off Puts).
func (r *daxDevice) close() error {
	r.copying.Lock() // no clone being filled
	defer r.copying.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	err := unix.Munmap(r.mem)
	r.mem = nil
	return errors.Join(err, r.f.Close())
}

func roundUp(n, a int64) int64 { return (n + a - 1) / a * a }

// slotBytes is the size of one index slot.
func (r *daxDevice) slotBytes() int64 { return r.hdr / 2 }

// readSlot decodes index slot i: its generation and index, or why not.
func (r *daxDevice) readSlot(i int) (uint64, *daxIndex, error) {
	b := r.mem[int64(i)*r.slotBytes() : int64(i+1)*r.slotBytes()]
	if string(b[:8]) != indexMagic {
		return 0, nil, errors.New("no index")
	}
	gen := binary.LittleEndian.Uint64(b[8:])
	n := int64(binary.LittleEndian.Uint32(b[16:]))
	if n > r.slotBytes()-indexHeader {
		return 0, nil, fmt.Errorf("index length %d exceeds the slot", n)
	}
	body := b[indexHeader : indexHeader+n]
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], b[24:56]) {
		return 0, nil, errors.New("index checksum mismatch")
	}
	var idx daxIndex
	if err := json.Unmarshal(body, &idx); err != nil {
		return 0, nil, fmt.Errorf("index: %w", err)
	}
	if idx.Version != 1 {
		return 0, nil, fmt.Errorf("index version %d, want 1", idx.Version)
	}
	return gen, &idx, nil
}

// load reads the newest valid index slot. A device with neither slot
// valid is formatted if its index area is blank or holds only a damaged
// index of thaw's (the copies are caches of snapshots kept elsewhere);
// anything else on it is refused rather than overwritten.
func (r *daxDevice) load() error {
	var errs []string
	found := false
	for i := range 2 {
		gen, idx, err := r.readSlot(i)
		if err != nil {
			errs = append(errs, fmt.Sprintf("slot %d: %v", i, err))
			found = found || err.Error() != "no index"
			continue
		}
		if idx.DeviceSize != r.size || idx.Align != r.align {
			return fmt.Errorf("the index describes a device of %d bytes aligned to %d, this one is %d aligned to %d (reconfigured namespace?)",
				idx.DeviceSize, idx.Align, r.size, r.align)
		}
		if r.idx.Version == 0 || gen > r.gen {
			r.gen, r.slot, r.idx = gen, i, *idx
		}
	}
	if r.idx.Version != 0 {
		return r.checkEntries()
	}
	if !found && !allZero(r.mem[:r.hdr]) {
		return fmt.Errorf("%w: the device holds data that is not a thaw memory store (no thaw index, its first %d MiB are not zero); "+
			"thaw will not overwrite it: give it a dedicated device, or zero that area first", ErrUnsupported, r.hdr>>20)
	}
	r.idx = daxIndex{Version: 1, DeviceSize: r.size, Align: r.align, Entries: []Entry{}}
	r.gen, r.slot = 0, 1
	if found {
		// Our own index, both slots damaged: the copies are lost (the
		// snapshots themselves are not); start empty and say so.
		r.notice = "the device's store index was damaged (" + strings.Join(errs, "; ") + "); started an empty store, store snapshots again"
	}
	return r.persist()
}

// checkEntries refuses an index whose entries overlap or leave the device.
func (r *daxDevice) checkEntries() error {
	spans := make([]span, 0, len(r.idx.Entries))
	for _, e := range r.idx.Entries {
		if !idRe.MatchString(e.Snapshot) || e.DeviceOffset < r.hdr || e.Bytes < 0 || e.DeviceOffset%r.align != 0 ||
			e.Bytes%r.align != 0 || e.DeviceOffset+e.Bytes > r.size {
			return fmt.Errorf("index entry %q is out of bounds (offset %d, %d bytes)", e.Snapshot, e.DeviceOffset, e.Bytes)
		}
		var units uint64
		for _, x := range e.Extents {
			units += x.Pages * memlayout.PageSize
		}
		if int64(units) != e.Bytes {
			return fmt.Errorf("index entry %q: extents hold %d bytes, the range %d", e.Snapshot, units, e.Bytes)
		}
		spans = append(spans, span{e.DeviceOffset, e.Bytes})
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].off < spans[j].off })
	for i := 1; i < len(spans); i++ {
		if spans[i-1].off+spans[i-1].len > spans[i].off {
			return errors.New("index entries overlap")
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), 1<<16)
		if !bytes.Equal(b[:n], make([]byte, n)) {
			return false
		}
		b = b[n:]
	}
	return true
}

// persist writes the index into the older slot and makes it durable; the
// newer slot stays intact until then, so a crash leaves one valid index.
func (r *daxDevice) persist() error {
	body, err := json.Marshal(r.idx)
	if err != nil {
		return err
	}
	if int64(len(body)) > r.slotBytes()-indexHeader {
		return fmt.Errorf("%w: the index (%d KiB) no longer fits its %d KiB slot", ErrFull, len(body)>>10, r.slotBytes()>>10)
	}
	next := 1 - r.slot
	b := r.mem[int64(next)*r.slotBytes() : int64(next+1)*r.slotBytes()]
	copy(b[indexHeader:], body)
	sum := sha256.Sum256(body)
	binary.LittleEndian.PutUint64(b[8:], r.gen+1)
	binary.LittleEndian.PutUint32(b[16:], uint32(len(body)))
	binary.LittleEndian.PutUint32(b[20:], 0)
	copy(b[24:56], sum[:])
	persistRange(b[8 : indexHeader+len(body)])
	copy(b[:8], indexMagic)
	persistRange(b[:8])
	r.gen, r.slot = r.gen+1, next
	return nil
}

// used lists every allocated range, sorted: stored copies, clone ranges,
// copies being stored.
func (r *daxDevice) used() []span {
	var out []span
	for _, e := range r.idx.Entries {
		out = append(out, span{e.DeviceOffset, e.Bytes})
	}
	for _, s := range r.clones {
		out = append(out, s)
	}
	for _, s := range r.filling {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return out
}

// alloc finds the first free range of n bytes (a multiple of the
// alignment); -1 if there is none.
func (r *daxDevice) alloc(n int64) int64 {
	at := r.hdr
	for _, s := range r.used() {
		if s.len == 0 {
			continue
		}
		if s.off-at >= n {
			return at
		}
		at = max(at, s.off+s.len)
	}
	if r.size-at >= n {
		return at
	}
	return -1
}

func (r *daxDevice) freeBytes() int64 {
	free := r.size - r.hdr
	for _, s := range r.used() {
		free -= s.len
	}
	return free
}

func (r *daxDevice) get(id string) (*Entry, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.entry(id)
}

func (r *daxDevice) regions(e *Entry) ([]memlayout.PageRun, error) { return extentRuns(e), nil }

func (r *daxDevice) entry(id string) (*Entry, error) {
	for i := range r.idx.Entries {
		if r.idx.Entries[i].Snapshot == id {
			e := r.idx.Entries[i]
			e.Path = r.path
			return &e, nil
		}
	}
	return nil, fmt.Errorf("snapshot %s: %w", id, ErrNotStored)
}

// put copies memPath's non-zero units onto the device, packed, hashing
// every byte of it; nothing stays allocated if it fails.
func (r *daxDevice) put(id, memPath string, want snapshot.FileInfo) (*Entry, error) {
	start := time.Now()
	src, err := openSource(id, memPath, want, r.align, "device units")
	if err != nil {
		return nil, err
	}
	defer src.Close()
	// Room for every unit the file has data in (holes need none); what
	// turns out to be zero is given back after the copy.
	var candidates int64
	for off := int64(0); off < want.Size; off += r.align {
		if hasData(src, off, r.align) {
			candidates++
		}
	}
	r.mu.Lock()
	if r.mem == nil {
		r.mu.Unlock()
		return nil, errors.New("memory store is closed")
	}
	at := r.alloc(candidates * r.align)
	if at < 0 {
		free := r.freeBytes()
		r.mu.Unlock()
		return nil, fmt.Errorf("%w: storing %s needs up to %d MiB of the device, %d MiB free (clones hold %d MiB)",
			ErrFull, id, candidates*r.align>>20, free>>20, r.cloneBytes()>>20)
	}
	r.filling[id] = span{at, candidates * r.align}
	r.mu.Unlock()
	done := func() { r.mu.Lock(); delete(r.filling, id); r.mu.Unlock() }

	pos := at
	extents, sum, err := scanUnits(src, want.Size, r.align, func(_ int64, unit []byte) error {
		if pos+r.align > at+candidates*r.align {
			return errors.New("the memory file changed while it was stored")
		}
		copy(r.mem[pos:pos+r.align], unit)
		pos += r.align
		return nil
	})
	if err != nil {
		done()
		return nil, fmt.Errorf("memory store: %s: %w", id, err)
	}
	if sum != want.SHA256 {
		done()
		return nil, fmt.Errorf("memory store: %s: copy of %s does not match the snapshot manifest (sha256 %.12s, want %.12s)", id, memPath, sum, want.SHA256)
	}
	persistRange(r.mem[at:pos])
	e := Entry{Snapshot: id, Size: want.Size, SHA256: want.SHA256, Bytes: pos - at, Regions: len(extents),
		PageSize: r.align, Extents: extents, DeviceOffset: at,
		StoredMS: float64(time.Since(start).Microseconds()) / 1000, StoredAt: time.Now().UTC()}
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.filling, id)
	r.idx.Entries = append(r.idx.Entries, e)
	if err := r.persist(); err != nil {
		r.idx.Entries = r.idx.Entries[:len(r.idx.Entries)-1]
		return nil, fmt.Errorf("memory store: %s: %w", id, err)
	}
	r.verified[id] = true
	e.Path = r.path
	return &e, nil
}

func (r *daxDevice) remove(id string) error {
	// Wait for clones being filled from it to finish.
	r.copying.Lock()
	defer r.copying.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return errors.New("memory store is closed")
	}
	for i, e := range r.idx.Entries {
		if e.Snapshot == id {
			old := r.idx.Entries
			r.idx.Entries = append(append([]Entry{}, old[:i]...), old[i+1:]...)
			if err := r.persist(); err != nil {
				r.idx.Entries = old
				return err
			}
			delete(r.verified, id)
			return nil
		}
	}
	return nil
}

func (r *daxDevice) cloneBytes() int64 {
	var n int64
	for _, s := range r.clones {
		n += s.len
	}
	return n
}

// mapping gives VM owner a range of the device of its own, filled from the
// copy (the kernel maps a device only shared, so clones cannot share the
// copy), mapped shared over guest RAM on the device's alignment.
func (r *daxDevice) mapping(e *Entry, owner string) (*Mapping, error) {
	c, err := r.clone(e.Snapshot, owner)
	if err != nil {
		return nil, err
	}
	m := &Mapping{Device: c.Device, Align: r.align, PrivateBytes: c.Bytes, FillMS: c.CopyMS,
		Release: func() { r.release(owner) }}
	for _, x := range c.Maps {
		m.Entries = append(m.Entries, memlayout.ShimEntry{GuestOff: x.GuestOff, Length: x.Length,
			FileOff: x.DeviceOff, Kind: memlayout.ShimDevice})
	}
	return m, nil
}

// clone gives the VM owner a private range of the device filled with the
// stored units of snapshot id. The range is the VM's until release.
func (r *daxDevice) clone(id, owner string) (*Clone, error) {
	if owner == "" {
		return nil, errors.New("memory store: a clone needs an owner")
	}
	r.copying.RLock()
	defer r.copying.RUnlock()
	r.mu.Lock()
	if r.mem == nil {
		r.mu.Unlock()
		return nil, errors.New("memory store is closed")
	}
	if _, ok := r.clones[owner]; ok {
		r.mu.Unlock()
		return nil, fmt.Errorf("memory store: %s already holds a clone range", owner)
	}
	e, err := r.entry(id)
	if err != nil {
		r.mu.Unlock()
		return nil, err
	}
	at := r.alloc(max(e.Bytes, 0))
	if at < 0 || e.Bytes == 0 {
		free := r.freeBytes()
		n := len(r.clones)
		r.mu.Unlock()
		if e.Bytes == 0 {
			return nil, fmt.Errorf("memory store: %s has no data to clone", id)
		}
		return nil, fmt.Errorf("%w: a clone of %s needs %d MiB of the device, %d MiB free (%d live clones hold %d MiB)",
			ErrFull, id, e.Bytes>>20, free>>20, n, r.cloneBytes()>>20)
	}
	r.clones[owner] = span{at, e.Bytes}
	mem := r.mem
	r.mu.Unlock()

	t0 := time.Now()
	copy(mem[at:at+e.Bytes], mem[e.DeviceOffset:e.DeviceOffset+e.Bytes])
	c := &Clone{Owner: owner, Snapshot: id, Device: r.path, Offset: at, Bytes: e.Bytes,
		CopyMS: float64(time.Since(t0).Microseconds()) / 1000}
	pos := uint64(at)
	for _, x := range e.Extents {
		n := x.Pages * memlayout.PageSize
		c.Maps = append(c.Maps, CloneMap{GuestOff: x.Start * memlayout.PageSize, Length: n, DeviceOff: pos})
		pos += n
	}
	return c, nil
}

// release returns owner's clone range to the free space. Call it only once
// the VM's process has exited: until then the range is mapped into it.
func (r *daxDevice) release(owner string) {
	r.mu.Lock()
	delete(r.clones, owner)
	r.mu.Unlock()
}

// owners lists the owners of live clone ranges.
func (r *daxDevice) owners() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.clones))
	for o := range r.clones {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}

// verify re-hashes a device store's copy of a snapshot (every byte of
// guest memory: the stored units, zeros elsewhere) once per process; a
// copy this process stored counts as verified.
func (r *daxDevice) verify(e *Entry) error {
	r.copying.RLock() // the device stays mapped while it is read
	defer r.copying.RUnlock()
	r.mu.Lock()
	done := r.verified[e.Snapshot]
	mem := r.mem
	r.mu.Unlock()
	if done {
		return nil
	}
	if mem == nil {
		return errors.New("memory store is closed")
	}
	h := sha256.New()
	zero := make([]byte, r.align)
	next := uint64(0) // guest offset hashed so far
	pos := e.DeviceOffset
	for _, x := range e.Extents {
		for ; next < x.Start*memlayout.PageSize; next += uint64(r.align) {
			h.Write(zero)
		}
		n := int64(x.Pages * memlayout.PageSize)
		h.Write(mem[pos : pos+n])
		pos += n
		next += uint64(n)
	}
	for ; next < uint64(e.Size); next += uint64(r.align) {
		h.Write(zero)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != e.SHA256 {
		return fmt.Errorf("the store's copy of %s is damaged (sha256 %.12s, want %.12s)", e.Snapshot, sum, e.SHA256)
	}
	r.mu.Lock()
	r.verified[e.Snapshot] = true
	r.mu.Unlock()
	return nil
}

// info fills a device store's capacity and use.
func (r *daxDevice) info(in *Info) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	in.CapacityBytes = r.size - r.hdr
	in.FreeBytes = r.freeBytes()
	in.ReservedBytes = r.cloneBytes()
	in.Clones = len(r.clones)
	for _, e := range r.idx.Entries {
		e.Path = r.path
		in.Entries = append(in.Entries, e)
		in.UsedBytes += e.Bytes
	}
	return nil
}
