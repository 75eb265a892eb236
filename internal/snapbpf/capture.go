// Package snapbpf captures the order in which one file's pages enter the
// host page cache, with an eBPF program on the page-cache tracepoint:
// SnapBPF's in-kernel working-set capture (Psomadakis et al., HotStorage'25,
// "eBPF capture and prefetch"). The program is compiled from
// bpf/snapbpf_capture.bpf.c at build time (`make build`) and loaded from a
// file, like the interposer shim.
package snapbpf

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// ObjectFile is the compiled capture program's file name; thawd looks for
// it beside its own binary.
const ObjectFile = "snapbpf_capture.bpf.o"

// The tracepoint the capture attaches to, and where tracefs lives.
const (
	TracepointGroup = "filemap"
	TracepointName  = "mm_filemap_add_to_page_cache"
	tracefs         = "/sys/kernel/tracing"
	kernelBTF       = "/sys/kernel/btf/vmlinux"
	programName     = "snapbpf_capture"
)

// ErrUnavailable means this host cannot run the capture; the message names
// what is missing.
var ErrUnavailable = errors.New("snapbpf capture unavailable")

// maxEvents bounds the capture buffer (8 bytes per event).
const maxEvents = 1 << 22

// Event is one folio entering the page cache of the captured file.
type Event struct {
	Index uint64 // file page index of the folio's first page
	Order uint8  // the folio holds 1<<Order pages
}

// Result is what a capture saw, in arrival order.
type Result struct {
	Events  []Event
	Seen    uint64 // events the program saw (Seen - Dropped were stored)
	Dropped uint64 // events that did not fit in the buffer
	Elapsed time.Duration
}

// Pages expands the events into page indexes in arrival order.
func (r Result) Pages() []uint64 {
	var out []uint64
	for _, e := range r.Events {
		for i := uint64(0); i < 1<<e.Order; i++ {
			out = append(out, e.Index+i)
		}
	}
	return out
}

// Check reports, as one error wrapping ErrUnavailable, everything this host
// lacks for a capture with the program in object: the object file, tracefs
// (mounted here if it is not), the tracepoint, kernel BTF (the program's
// CO-RE relocations need it) and the privilege to load BPF programs.
func Check(object string) error {
	var missing []string
	if object == "" {
		missing = append(missing, "the capture program path is not configured (thawd --snapbpf-object)")
	} else if _, err := os.Stat(object); err != nil {
		missing = append(missing, fmt.Sprintf("capture program %s (run `make build`): %v", object, err))
	}
	if err := mountTracefs(); err != nil {
		missing = append(missing, err.Error())
	} else if _, err := os.Stat(filepath.Join(tracefs, "events", TracepointGroup, TracepointName)); err != nil {
		missing = append(missing, fmt.Sprintf("tracepoint %s:%s: %v", TracepointGroup, TracepointName, err))
	}
	if _, err := os.Stat(kernelBTF); err != nil {
		missing = append(missing, fmt.Sprintf("kernel BTF (%s): %v", kernelBTF, err))
	}
	if !canLoadBPF() {
		missing = append(missing, "CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN) to load and attach BPF programs")
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: missing %s", ErrUnavailable, joinMissing(missing))
}

func joinMissing(m []string) string {
	s := m[0]
	for _, x := range m[1:] {
		s += "; " + x
	}
	return s
}

// mountTracefs mounts tracefs at /sys/kernel/tracing unless it is there.
func mountTracefs() error {
	if _, err := os.Stat(filepath.Join(tracefs, "events")); err == nil {
		return nil
	}
	if err := unix.Mount("nodev", tracefs, "tracefs", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("tracefs at %s (mount -t tracefs nodev %s): %v", tracefs, tracefs, err)
	}
	if _, err := os.Stat(filepath.Join(tracefs, "events")); err != nil {
		return fmt.Errorf("tracefs at %s: %v", tracefs, err)
	}
	return nil
}

// canLoadBPF checks the effective capabilities: CAP_SYS_ADMIN, or CAP_BPF
// with CAP_PERFMON (needed to attach to a tracepoint).
func canLoadBPF() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	return has(unix.CAP_SYS_ADMIN) || (has(unix.CAP_BPF) && has(unix.CAP_PERFMON))
}

// Capture is a capture in progress.
type Capture struct {
	coll  *ebpf.Collection
	link  link.Link
	start time.Time
	limit uint32
}

// Start loads the program in object, configures it for path's inode and
// device, and attaches it: from now on every folio of path that enters the
// page cache is recorded. Evict path from the page cache first, or pages
// already cached are never seen. Stop ends it.
func Start(object, path string) (*Capture, error) {
	if err := Check(object); err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("snapbpf capture: %w", err)
	}
	spec, err := ebpf.LoadCollectionSpec(object)
	if err != nil {
		return nil, fmt.Errorf("snapbpf capture: load %s: %w", object, err)
	}
	// The kernel encodes dev_t as major<<20 | minor (MKDEV); stat(2)
	// returns the user-space encoding.
	kdev := uint32(unix.Major(st.Dev))<<20 | uint32(unix.Minor(st.Dev))
	for name, v := range map[string]any{"target_ino": st.Ino, "target_dev": kdev} {
		vs, ok := spec.Variables[name]
		if !ok {
			return nil, fmt.Errorf("snapbpf capture: %s has no variable %s (stale object?)", object, name)
		}
		if err := vs.Set(v); err != nil {
			return nil, fmt.Errorf("snapbpf capture: set %s: %w", name, err)
		}
	}
	// A page can enter the cache more than once (evicted and read again),
	// so leave room beyond the file's page count.
	limit := uint32(min(max(2*(st.Size/4096)+1024, 4096), maxEvents))
	ev, ok := spec.Maps["events"]
	if !ok {
		return nil, fmt.Errorf("snapbpf capture: %s has no events map (stale object?)", object)
	}
	ev.MaxEntries = limit
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("snapbpf capture: load program (BTF relocation or verifier): %w", err)
	}
	prog, ok := coll.Programs[programName]
	if !ok {
		coll.Close()
		return nil, fmt.Errorf("snapbpf capture: %s has no program %s", object, programName)
	}
	l, err := link.Tracepoint(TracepointGroup, TracepointName, prog, nil)
	if err != nil {
		coll.Close()
		return nil, fmt.Errorf("snapbpf capture: attach %s:%s: %w", TracepointGroup, TracepointName, err)
	}
	return &Capture{coll: coll, link: l, start: time.Now(), limit: limit}, nil
}

// Stop detaches the program and returns what it recorded, in arrival order.
func (c *Capture) Stop() (Result, error) {
	defer c.coll.Close()
	if err := c.link.Close(); err != nil {
		return Result{}, fmt.Errorf("snapbpf capture: detach: %w", err)
	}
	r := Result{Elapsed: time.Since(c.start)}
	if err := c.coll.Variables["captured"].Get(&r.Seen); err != nil {
		return r, fmt.Errorf("snapbpf capture: read counter: %w", err)
	}
	if err := c.coll.Variables["dropped"].Get(&r.Dropped); err != nil {
		return r, fmt.Errorf("snapbpf capture: read counter: %w", err)
	}
	n := uint32(min(r.Seen, uint64(c.limit)))
	vals, err := readEvents(c.coll.Maps["events"], n)
	if err != nil {
		return r, err
	}
	r.Events = make([]Event, len(vals))
	for i, v := range vals {
		r.Events[i] = Event{Index: v >> 8, Order: uint8(v & 0xff)}
	}
	return r, nil
}

// Close abandons a capture without reading it.
func (c *Capture) Close() error {
	err := c.link.Close()
	c.coll.Close()
	return err
}

// readEvents reads the first n slots of the events array.
func readEvents(m *ebpf.Map, n uint32) ([]uint64, error) {
	out := make([]uint64, 0, n)
	var cursor ebpf.MapBatchCursor
	keys := make([]uint32, 4096)
	vals := make([]uint64, 4096)
	for uint32(len(out)) < n {
		k, err := m.BatchLookup(&cursor, keys, vals, nil)
		if k == 0 && err != nil {
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			return nil, fmt.Errorf("snapbpf capture: read events: %w", err)
		}
		for i := 0; i < k && uint32(len(out)) < n; i++ {
			if keys[i] != uint32(len(out)) {
				return nil, fmt.Errorf("snapbpf capture: read events: slot %d out of order", keys[i])
			}
			out = append(out, vals[i])
		}
		if err != nil {
			break
		}
	}
	if uint32(len(out)) != n {
		return nil, fmt.Errorf("snapbpf capture: read %d of %d events", len(out), n)
	}
	return out, nil
}
