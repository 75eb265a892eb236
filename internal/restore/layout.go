package restore

import (
	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// rangeSources are the memory description's sources of each layout entry
// kind memlayout plans.
var rangeSources = map[memlayout.ShimKind]vmm.Source{
	memlayout.ShimAnonymous:  vmm.SourceZero,
	memlayout.ShimMemoryFile: vmm.SourceMemoryFile,
	memlayout.ShimLoadingSet: vmm.SourceLoadingSet,
	memlayout.ShimDevice:     vmm.SourceDevice,
}

// layoutOf is the memory layout of size bytes whose ranges are entries,
// checked as the VMM will check it.
func layoutOf(size uint64, entries []memlayout.ShimEntry, loadingSet, device string) (*vmm.Layout, error) {
	l := &vmm.Layout{Size: size, Ranges: make([]vmm.Range, len(entries)), LoadingSet: loadingSet, Device: device}
	for i, e := range entries {
		src, ok := rangeSources[e.Kind]
		if !ok {
			src = vmm.Source(e.Kind) // refused by Validate
		}
		l.Ranges[i] = vmm.Range{GuestOff: e.GuestOff, Length: e.Length, FileOff: e.FileOff, Source: src}
	}
	return l, l.Validate()
}
