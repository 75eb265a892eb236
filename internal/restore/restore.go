// Package restore holds thaw's snapshot restore strategies: how the guest
// memory of a snapshot is mapped into a restored VM and how its pages reach
// memory. The set of strategies is closed: a Kind names one, and Plan is the
// single place that branches on it (as Firecracker's persist.rs branches on
// MemBackendType).
package restore

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// Kind names a restore strategy.
type Kind string

const (
	// Vanilla maps the snapshot's memory file private and copy-on-write, the
	// equivalent of Firecracker's File memory backend: the host kernel pages
	// guest memory in on demand (with its readahead); the file is never
	// modified, so any number of VMs restore from it at once.
	Vanilla Kind = "vanilla"
)

// Kinds lists every strategy, in the order documentation and benchmarks use.
var Kinds = []Kind{Vanilla}

// Default is the strategy used when a request names none.
const Default = Vanilla

// ParseKind validates a strategy name; "" means Default.
func ParseKind(s string) (Kind, error) {
	if s == "" {
		return Default, nil
	}
	for _, k := range Kinds {
		if string(k) == s {
			return k, nil
		}
	}
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return "", fmt.Errorf("unknown restore strategy %q (one of: %s)", s, strings.Join(names, ", "))
}

// Snapshot is the narrow view of a snapshot a strategy sees.
type Snapshot struct {
	Dir      string
	Manifest *snapshot.Manifest
}

// MemoryPath is the snapshot's guest memory file.
func (s Snapshot) MemoryPath() string { return filepath.Join(s.Dir, snapshot.MemoryFile) }

// Plan returns how the VMM must back guest memory to restore snap with kind.
func Plan(kind Kind, snap Snapshot) (vmm.Memory, error) {
	switch kind {
	case Vanilla:
		return vmm.Memory{Path: snap.MemoryPath(), Shared: false}, nil
	}
	return vmm.Memory{}, fmt.Errorf("restore strategy %q is not available", kind)
}
