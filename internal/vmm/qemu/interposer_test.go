package qemu

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// TestInterposerEnv: each form of the neutral memory description becomes
// exactly the interposer variables docs/shim-layout.md names (as the
// strategies set them before the description was neutral), and nothing for
// a booting VM's shared memory.
func TestInterposerEnv(t *testing.T) {
	dir := t.TempDir()
	layout := &vmm.Layout{Size: 64 << 20, LoadingSet: "/s/ls", Device: "/dev/dax0.0", Populate: true, Stats: "/r/stats",
		Ranges: []vmm.Range{
			{GuestOff: 0, Length: 1 << 20, FileOff: 0, Source: vmm.SourceMemoryFile},
			{GuestOff: 1 << 20, Length: 8192, FileOff: 4096, Source: vmm.SourceLoadingSet},
			{GuestOff: 2 << 20, Length: 4096, Source: vmm.SourceZero},
			{GuestOff: 4 << 20, Length: 4 << 20, FileOff: 8 << 20, Source: vmm.SourceDevice},
		}}
	keep := vmm.FileUse{KeepIntact: true}
	tests := []struct {
		name string
		mem  vmm.Memory
		want string
	}{
		{"boot: shared memory, passed through", vmm.Memory{Path: "/r/memory", Shared: true}, ""},
		{"whole file kept intact (vanilla)", vmm.Memory{Path: "/s/memory", File: keep},
			"THAW_SHIM_MEMFILE=/s/memory THAW_SHIM_PROTECT=1"},
		{"whole file with the huge-page hint kept", vmm.Memory{Path: "/s/memory", File: vmm.FileUse{KeepIntact: true, HugePages: true}},
			"THAW_SHIM_MEMFILE=/s/memory THAW_SHIM_PROTECT=1 THAW_SHIM_HUGEPAGE=keep"},
		{"record VM's own copy", vmm.Memory{Path: "/m", Shared: true, File: vmm.FileUse{KeepIntact: true, PunchFreed: true, NoReadahead: true}},
			"THAW_SHIM_MEMFILE=/m THAW_SHIM_PUNCH=pass THAW_SHIM_PROTECT=1 THAW_SHIM_READAHEAD=off"},
		{"userfaultfd", vmm.Memory{Path: "/m", Backing: vmm.Backing{Kind: vmm.BackedByUffd, UffdSocket: "/r/uffd.sock"}, File: keep},
			"THAW_SHIM_MODE=uffd THAW_SHIM_MEMFILE=/m THAW_SHIM_UFFD_SOCK=/r/uffd.sock THAW_SHIM_PROTECT=1"},
		{"layout", vmm.Memory{Path: "/s/memory", Backing: vmm.Backing{Kind: vmm.BackedByLayout, Layout: layout}, File: keep},
			"THAW_SHIM_MODE=layout THAW_SHIM_MEMFILE=/s/memory THAW_SHIM_LAYOUT=" + filepath.Join(dir, LayoutFile) +
				" THAW_SHIM_LSFILE=/s/ls THAW_SHIM_DEVICE=/dev/dax0.0 THAW_SHIM_POPULATE=read THAW_SHIM_STATS=/r/stats THAW_SHIM_PROTECT=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := InterposerEnv(tt.mem, dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(env, " "); got != tt.want {
				t.Errorf("env:\n got %s\nwant %s", got, tt.want)
			}
		})
	}
	// The layout's table holds its ranges, each with its source's kind.
	b, err := os.ReadFile(filepath.Join(dir, LayoutFile))
	if err != nil {
		t.Fatal(err)
	}
	tab, err := memlayout.DecodeShimLayout(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []memlayout.ShimEntry{
		{GuestOff: 0, Length: 1 << 20, FileOff: 0, Kind: memlayout.ShimMemoryFile},
		{GuestOff: 1 << 20, Length: 8192, FileOff: 4096, Kind: memlayout.ShimLoadingSet},
		{GuestOff: 2 << 20, Length: 4096, Kind: memlayout.ShimAnonymous},
		{GuestOff: 4 << 20, Length: 4 << 20, FileOff: 8 << 20, Kind: memlayout.ShimDevice},
	}
	if tab.MemSize != 64<<20 || !reflect.DeepEqual(tab.Entries, want) {
		t.Errorf("layout table %d bytes, %+v; want %d, %+v", tab.MemSize, tab.Entries, 64<<20, want)
	}
	// A layout that breaks the rules is refused before anything is written.
	bad := *layout
	bad.Ranges = []vmm.Range{{GuestOff: 100, Length: 4096, Source: vmm.SourceMemoryFile}}
	if _, err := InterposerEnv(vmm.Memory{Path: "/m", Backing: vmm.Backing{Kind: vmm.BackedByLayout, Layout: &bad}}, t.TempDir()); !errors.Is(err, vmm.ErrBadLayout) {
		t.Errorf("misaligned layout: %v, want ErrBadLayout", err)
	}
}
