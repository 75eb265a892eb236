// Package faulttrace counts, per process, user page faults, the read bios
// a process submits and the time its threads are blocked in uninterruptible
// sleep, with an eBPF program on tracepoints (bpf/faulttrace.bpf.c): what
// FaaSnap's §6.5 measures with bpftrace, as far as a kernel without kprobes
// allows (docs/bench/ablation.md).
package faulttrace

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/thaw-dev/thaw/internal/snapbpf"
)

// ObjectFile is the compiled program's file name; thawd looks for it
// beside its own binary.
const ObjectFile = "faulttrace.bpf.o"

// Counters are one process's counts since the tracer started (or since it
// first ran, for a later process). The layout matches struct counters in
// the program.
type Counters struct {
	Faults    uint64 // user page faults (exceptions:page_fault_user)
	ReadBios  uint64 // read bios submitted (block:block_bio_queue)
	ReadBytes uint64 // and their bytes
	BlockedNS uint64 // time threads spent in D state (sched_switch to sched_wakeup)
	Blocked   uint64 // how many such waits
}

// Sub returns c - b, counter by counter.
func (c Counters) Sub(b Counters) Counters {
	return Counters{Faults: c.Faults - b.Faults, ReadBios: c.ReadBios - b.ReadBios, ReadBytes: c.ReadBytes - b.ReadBytes,
		BlockedNS: c.BlockedNS - b.BlockedNS, Blocked: c.Blocked - b.Blocked}
}

// BlockedMS is BlockedNS in milliseconds.
func (c Counters) BlockedMS() float64 { return float64(c.BlockedNS) / 1e6 }

// programs are the program names and the tracepoints they attach to.
var programs = []struct{ prog, group, name string }{
	{"faulttrace_fault", "exceptions", "page_fault_user"},
	{"faulttrace_bio", "block", "block_bio_queue"},
	{"faulttrace_switch", "sched", "sched_switch"},
	{"faulttrace_wakeup", "sched", "sched_wakeup"},
}

// Tracer is the loaded, attached program.
type Tracer struct {
	mu    sync.Mutex
	coll  *ebpf.Collection
	links []link.Link
}

// Open loads the program in object and attaches it. It needs what
// snapbpf's capture needs (tracefs, kernel BTF, CAP_BPF and CAP_PERFMON);
// errors say what is missing.
func Open(object string) (*Tracer, error) {
	if object == "" {
		return nil, errors.New("faulttrace: no program configured")
	}
	if _, err := os.Stat(object); err != nil {
		return nil, fmt.Errorf("faulttrace: program %s (run `make build`): %w", object, err)
	}
	if err := snapbpf.Check(object); err != nil { // tracefs (mounted), BTF, privileges
		return nil, fmt.Errorf("faulttrace: %w", err)
	}
	spec, err := ebpf.LoadCollectionSpec(object)
	if err != nil {
		return nil, fmt.Errorf("faulttrace: load %s: %w", object, err)
	}
	coll, err := ebpf.NewCollection(spec)
	if err != nil {
		return nil, fmt.Errorf("faulttrace: load %s into the kernel: %w", object, err)
	}
	t := &Tracer{coll: coll}
	for _, p := range programs {
		prog := coll.Programs[p.prog]
		if prog == nil {
			t.Close()
			return nil, fmt.Errorf("faulttrace: %s has no program %s (stale object?)", object, p.prog)
		}
		l, err := link.Tracepoint(p.group, p.name, prog, nil)
		if err != nil {
			t.Close()
			return nil, fmt.Errorf("faulttrace: attach %s:%s: %w", p.group, p.name, err)
		}
		t.links = append(t.links, l)
	}
	return t, nil
}

// Read returns process tgid's counters (zero for a process never seen).
func (t *Tracer) Read(tgid int) (Counters, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var c Counters
	if t.coll == nil {
		return c, errors.New("faulttrace: closed")
	}
	err := t.coll.Maps["procs"].Lookup(uint32(tgid), &c)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return Counters{}, nil
	}
	return c, err
}

// Close detaches and unloads the program.
func (t *Tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for _, l := range t.links {
		errs = append(errs, l.Close())
	}
	t.links = nil
	if t.coll != nil {
		t.coll.Close()
		t.coll = nil
	}
	return errors.Join(errs...)
}
