package restore

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/procstat"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// faasnapRecord is FaaSnap's record phase (section 4.4, host page
// recording; section 5): the VM restored from the clean snapshot runs its
// first invocation while the daemon calls mincore on the guest memory file
// each time the VMM's resident set has grown by a group's worth of pages,
// so pages that host readahead brought in count too, numbered by the scan
// in which they first appeared.
//
// Where thaw differs: Firecracker maps the clean memory file private and
// then writes a full memory dump for the warm snapshot. QEMU 7.2 cannot
// dump a private mapping into thaw's format, so the record VM maps a sparse
// copy of the clean memory file shared instead (evicted from the page cache
// first, so every page it touches is read through the page cache exactly
// like the private mapping would). After the invocation that file *is* the
// warm guest memory, and the daemon snapshots it the usual way.
type faasnapRecord struct {
	memPath   string
	groupSize int

	mu       sync.Mutex
	recorder *memlayout.Recorder
	mapping  []byte
	vec      []byte
	scans    int
	stop     chan struct{}
	stopped  chan struct{}
	pid      int
}

// BeginFaaSnapRecord prepares a record restore of snap: the sparse copy of
// its memory goes to the VM's run directory.
func BeginFaaSnapRecord(_ context.Context, snap Snapshot, env Env, groupSize int) (Session, error) {
	mem := filepath.Join(env.RunDir, "memory")
	if _, err := snapshot.CopySparse(mem, snap.MemoryPath()); err != nil {
		return nil, fmt.Errorf("record: copy memory: %w", err)
	}
	if err := pagecache.EvictAll(mem, snap.MemoryPath()); err != nil {
		return nil, err
	}
	return &faasnapRecord{memPath: mem, groupSize: groupSize, recorder: &memlayout.Recorder{},
		stop: make(chan struct{}), stopped: make(chan struct{})}, nil
}

func (r *faasnapRecord) Kind() Kind { return FaaSnap }

// Memory is the shared copy: guest writes land in it.
func (r *faasnapRecord) Memory() vmm.Memory { return vmm.Memory{Path: r.memPath, Shared: true} }

// Started maps the memory file in the daemon and starts polling.
func (r *faasnapRecord) Started(_ context.Context, pid int) error {
	f, err := os.Open(r.memPath)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("record: map memory: %w", err)
	}
	r.mu.Lock()
	r.mapping, r.vec = m, make([]byte, (len(m)+4095)/4096)
	r.mu.Unlock()
	r.scan() // what QEMU itself touched while starting
	r.pid = pid
	go r.poll()
	return nil
}

// poll scans whenever the VMM's resident set grew by a group (the paper
// polls procfs for the RSS for the same reason: mincore over hundreds of
// MiB is not free, and a group is the unit of ordering anyway).
func (r *faasnapRecord) poll() {
	defer close(r.stopped)
	last := rssPages(r.pid)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-tick.C:
		}
		if rss := rssPages(r.pid); rss >= last+uint64(r.groupSize) {
			r.scan()
			last = rss
		}
	}
}

func rssPages(pid int) uint64 {
	c, err := procstat.Read(pid)
	if err != nil {
		return 0
	}
	return (c.RssFileKiB + c.RssShmemKiB + c.RssAnonKiB) / 4
}

func (r *faasnapRecord) scan() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mapping == nil {
		return
	}
	if err := pagecache.Mincore(r.mapping, r.vec); err != nil {
		return
	}
	r.recorder.Observe(r.vec)
	r.scans++
}

// InvocationDone takes the last scan and stops polling.
func (r *faasnapRecord) InvocationDone() {
	select {
	case <-r.stop:
		return
	default:
	}
	close(r.stop)
	if r.pid != 0 { // the poller runs only once Started succeeded
		<-r.stopped
		r.scan()
	}
}

// RecordedPages is the working set in order of first appearance.
func (r *faasnapRecord) RecordedPages() []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorder.Pages()
}

// Scans is how many mincore scans were taken.
func (r *faasnapRecord) Scans() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.scans
}

func (r *faasnapRecord) Stats() Stats {
	return Stats{RecordedPageCount: uint64(len(r.RecordedPages()))}
}

func (r *faasnapRecord) Close() error {
	r.InvocationDone()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mapping != nil {
		err := unix.Munmap(r.mapping)
		r.mapping = nil
		return err
	}
	return nil
}
