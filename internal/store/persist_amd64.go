package store

import "unsafe"

//go:noescape
func flushLines(p unsafe.Pointer, n uintptr)

// persistRange makes stores to b durable on persistent memory mapped
// straight into the process (device-DAX has no msync: the kernel returns
// EINVAL): CPU cache lines are flushed to the memory controller, which ADR
// platforms drain on power loss. On DRAM (the tmpfs stand-in) it is only
// a cache flush.
func persistRange(b []byte) {
	if len(b) > 0 {
		flushLines(unsafe.Pointer(&b[0]), uintptr(len(b)))
	}
}
