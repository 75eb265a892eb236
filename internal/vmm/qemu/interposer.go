package qemu

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/vmm"
)

// LayoutFile is the file in a VM's run directory that holds its memory
// layout as the interposer's table (docs/shim-layout.md).
const LayoutFile = "layout.bin"

// interposer is what libthaw_shim.so does in one QEMU (docs/shim-layout.md).
// The zero value passes every mapping through.
type interposer struct {
	Mode        string // "" (pass-through), "layout" or "uffd"
	MemFile     string // the guest memory file whose mapping is replaced or protected
	Layout      string // layout mode: the layout table
	LSFile      string // layout mode: the loading-set file of kind-2 entries
	Device      string // layout mode: the device of kind-3 entries
	Populate    bool   // layout mode: pre-fault the whole range before returning
	Stats       string // layout mode with Populate: where the interposer reports
	UffdSock    string // uffd mode: the daemon's socket for the userfaultfd
	Protect     bool   // QEMU's hole punches into MemFile become no-ops
	PassPunches bool   // with Protect: punches go through, the huge-page hint is still handled
	HugePages   bool   // keep QEMU's MADV_HUGEPAGE on MemFile's mapping
	NoReadahead bool   // map MemFile MADV_RANDOM
}

// Interposer modes.
const (
	modeLayout = "layout"
	modeUffd   = "uffd"
)

// env is the interposer's configuration as environment variables (without
// LD_PRELOAD and the file table, which the launch adds).
func (c interposer) env() []string {
	var env []string
	add := func(k, v string) {
		if v != "" {
			env = append(env, "THAW_SHIM_"+k+"="+v)
		}
	}
	add("MODE", c.Mode)
	add("MEMFILE", c.MemFile)
	add("LAYOUT", c.Layout)
	add("LSFILE", c.LSFile)
	add("DEVICE", c.Device)
	if c.Populate {
		add("POPULATE", "read")
	}
	add("STATS", c.Stats)
	add("UFFD_SOCK", c.UffdSock)
	if c.PassPunches {
		add("PUNCH", "pass")
	}
	if c.Protect {
		add("PROTECT", "1")
	}
	if c.HugePages {
		add("HUGEPAGE", "keep")
	}
	if c.NoReadahead {
		add("READAHEAD", "off")
	}
	return env
}

// interposerFor is the interposer's part in backing m: the memory file is
// named to it when it is kept intact or its mapping is replaced; a layout
// is written to dir as the interposer's table.
func interposerFor(m vmm.Memory, dir string) (interposer, error) {
	c := interposer{Protect: m.File.KeepIntact, PassPunches: m.File.PunchFreed,
		HugePages: m.File.HugePages, NoReadahead: m.File.NoReadahead}
	if m.File.KeepIntact || m.Backing.Kind != vmm.BackedByFile {
		c.MemFile = m.Path
	}
	switch b := m.Backing; b.Kind {
	case vmm.BackedByFile:
	case vmm.BackedByUffd:
		c.Mode, c.UffdSock = modeUffd, b.UffdSocket
	case vmm.BackedByLayout:
		if b.Layout == nil {
			return c, fmt.Errorf("%w: layout-backed memory without a layout", vmm.ErrBadLayout)
		}
		path := filepath.Join(dir, LayoutFile)
		if err := writeLayout(path, b.Layout); err != nil {
			return c, err
		}
		l := b.Layout
		c.Mode, c.Layout, c.LSFile, c.Device, c.Populate, c.Stats = modeLayout, path, l.LoadingSet, l.Device, l.Populate, l.Stats
	default:
		return c, fmt.Errorf("unknown memory backing %s", b.Kind)
	}
	return c, nil
}

// shimKinds are the interposer's entry kinds of each range source.
var shimKinds = map[vmm.Source]memlayout.ShimKind{
	vmm.SourceZero:       memlayout.ShimAnonymous,
	vmm.SourceMemoryFile: memlayout.ShimMemoryFile,
	vmm.SourceLoadingSet: memlayout.ShimLoadingSet,
	vmm.SourceDevice:     memlayout.ShimDevice,
}

// writeLayout writes l as the interposer's layout table to path.
func writeLayout(path string, l *vmm.Layout) error {
	if err := l.Validate(); err != nil {
		return err
	}
	t := memlayout.ShimTable{MemSize: l.Size, Entries: make([]memlayout.ShimEntry, len(l.Ranges))}
	for i, r := range l.Ranges {
		t.Entries[i] = memlayout.ShimEntry{GuestOff: r.GuestOff, Length: r.Length, FileOff: r.FileOff, Kind: shimKinds[r.Source]}
	}
	b, err := t.Encode()
	if err != nil {
		return fmt.Errorf("memory layout: %w", err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("memory layout: %w", err)
	}
	return nil
}

// InterposerEnv is the interposer's environment that backs m as a QEMU
// started by Start would get it (a layout's table written to dir): for
// tests that preload the interposer into a program of their own.
func InterposerEnv(m vmm.Memory, dir string) ([]string, error) {
	c, err := interposerFor(m, dir)
	if err != nil {
		return nil, err
	}
	return c.env(), nil
}
