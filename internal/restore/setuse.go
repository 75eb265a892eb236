package restore

import (
	"errors"
	"fmt"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/pagemap"
	"github.com/thaw-dev/thaw/wire"
)

// SetUse is how a restored guest used the set its strategy recorded.
type SetUse = wire.SetUseStats

// ErrNoSet: the session has no recorded set to compare with (vanilla, a
// variant, a lazy or record restore).
var ErrNoSet = errors.New("the restore has no recorded set to compare with")

// SetMeasurer is a session that can say how the guest used its recorded
// set: the pages it holds, those the guest touched, and the non-zero pages
// the guest touched outside it (served on demand). ErrNoSet if it has none.
type SetMeasurer interface {
	MeasureSet(pid int) (SetUse, error)
}

// Unwrapper is a session wrapping another (the daemon's wrappers), so the
// strategy's own session can be reached.
type Unwrapper interface {
	Unwrap() Session
}

// MeasureSet compares what the guest of the VMM process pid touched with
// the set sess's strategy recorded (REAP's working set, FaaSnap's loading
// set, SnapBPF's prefetch set). Call it after the invocation answered and
// before the VM is torn down. ErrNoSet if the session has no set.
func MeasureSet(sess Session, pid int) (SetUse, error) {
	for {
		if m, ok := sess.(SetMeasurer); ok {
			u, err := m.MeasureSet(pid)
			if err != nil {
				return SetUse{}, err
			}
			if touched := u.SetTouchedPages + u.SetOutsidePages; touched > 0 {
				u.SetOutsideRatio = float64(u.SetOutsidePages) / float64(touched)
			}
			if u.SetTouchedPages < u.SetPages {
				u.SetUnusedPages = u.SetPages - u.SetTouchedPages
			}
			return u, nil
		}
		w, ok := sess.(Unwrapper)
		if !ok {
			return SetUse{}, ErrNoSet
		}
		sess = w.Unwrap()
	}
}

// pageSet is a set of guest pages.
type pageSet []uint64

func newPageSet(pages uint64, runs []memlayout.PageRun) pageSet {
	s := make(pageSet, (pages+63)/64)
	for _, r := range runs {
		for p := r.Start; p < r.End() && p < pages; p++ {
			s[p/64] |= 1 << (p % 64)
		}
	}
	return s
}

func (s pageSet) has(p uint64) bool { return pagemap.Has(s, p) }

// presentUse counts, from the pages the process maps at base (guest page
// p at base+p*PageSize), those of the set and the non-zero ones outside it.
func presentUse(pid int, base uintptr, pages uint64, set []memlayout.PageRun, nonzero []memlayout.PageRun) (SetUse, error) {
	bits, err := pagemap.Present(pid, base, int(pages))
	if err != nil {
		return SetUse{}, err
	}
	in := newPageSet(pages, set)
	var u SetUse
	for _, r := range set {
		for p := r.Start; p < r.End() && p < pages; p++ {
			u.SetPages++
			if pagemap.Has(bits, p) {
				u.SetTouchedPages++
			}
		}
	}
	for _, r := range nonzero {
		for p := r.Start; p < r.End() && p < pages; p++ {
			if pagemap.Has(bits, p) && !in.has(p) {
				u.SetOutsidePages++
			}
		}
	}
	return u, nil
}

// MeasureSet: the loading set's pages the guest mapped, and the non-zero
// regions' pages outside it (faulted from the memory file).
func (f *faasnap) MeasureSet(pid int) (SetUse, error) {
	if f.variant != "" {
		return SetUse{}, ErrNoSet
	}
	base, err := f.guestBase(pid)
	if err != nil {
		return SetUse{}, err
	}
	set := make([]memlayout.PageRun, len(f.art.LoadingRegions))
	for i, l := range f.art.LoadingRegions {
		set[i] = l.PageRun()
	}
	return presentUse(pid, base, uint64(memSize(f.snap))/memlayout.PageSize, set, f.art.NonzeroRegions)
}

// guestBase is where QEMU maps guest page 0: from a mapping of the memory
// file, else of the loading-set file (whose region at file offset o holds
// guest page Start).
func (f *faasnap) guestBase(pid int) (uintptr, error) {
	base, err := pagemap.FileBase(pid, f.snap.MemoryPath())
	if err == nil || !errors.Is(err, pagemap.ErrNotMapped) {
		return base, err
	}
	ms, err := pagemap.Mappings(pid, f.lsPath)
	if err != nil {
		return 0, err
	}
	for _, m := range ms {
		for _, l := range f.art.LoadingRegions {
			if l.FileOff == m.Off {
				return m.Start - uintptr(l.Start*memlayout.PageSize), nil
			}
		}
	}
	return 0, fmt.Errorf("guest memory of process %d: %w", pid, pagemap.ErrNotMapped)
}

// MeasureSet: the prefetch ranges' pages the guest mapped, and the data
// pages of the memory file outside them.
func (s *snapbpf) MeasureSet(pid int) (SetUse, error) {
	base, err := pagemap.FileBase(pid, s.snap.MemoryPath())
	if err != nil {
		return SetUse{}, err
	}
	data, err := memlayout.DataRegions(s.snap.MemoryPath())
	if err != nil {
		return SetUse{}, err
	}
	return presentUse(pid, base, uint64(memSize(s.snap))/memlayout.PageSize, s.art.Ranges, data)
}

// MeasureSet: every page REAP installed is mapped before the guest runs,
// so what the guest touched is what it referenced since Started cleared
// the referenced bits; the pages outside the set are those the fault
// server read from the memory file.
func (r *uffdSession) MeasureSet(pid int) (SetUse, error) {
	if !r.measures() {
		return SetUse{}, ErrNoSet
	}
	r.mu.Lock()
	region, srv, cleared := r.region, r.srv, r.cleared
	r.mu.Unlock()
	if region == nil || srv == nil || !cleared {
		return SetUse{}, ErrNoSet
	}
	ref, err := pagemap.Referenced(pid, uintptr(region.Addr), uintptr(region.Addr+region.Length))
	if err != nil {
		return SetUse{}, err
	}
	st := srv.Stats()
	touched := ref / memlayout.PageSize
	u := SetUse{SetPages: uint64(len(r.plan.wsPages)), SetOutsidePages: st.Copied}
	if out := st.Copied + st.Zeroed; touched > out {
		u.SetTouchedPages = min(touched-out, u.SetPages)
	}
	return u, nil
}

// measures: a local REAP restore (not a record session, not lazy) can
// measure its set's use.
func (r *uffdSession) measures() bool {
	return r.plan.kind == REAP && !r.plan.record && r.plan.source == nil && r.plan.wsFile != ""
}
