//go:build !amd64

package store

import "sync/atomic"

// persistRange on architectures thaw has no cache-flush instruction for:
// a full fence only. The index's checksum and the copy's verification
// before first use catch what a power loss leaves half written.
func persistRange(b []byte) {
	var x atomic.Int32
	x.Add(1)
	_ = b
}
