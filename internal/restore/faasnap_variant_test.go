package restore

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// TestFreedSinceClean: working-set pages non-zero in the clean memory and
// zero in the warm one are freed; pages zero in both, or non-zero in the
// warm one, are not.
func TestFreedSinceClean(t *testing.T) {
	page := func(b byte) []byte {
		p := make([]byte, snapshot.PageSize)
		p[7] = b
		return p
	}
	write := func(dir string, pages ...[]byte) Snapshot {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		var b []byte
		for _, p := range pages {
			b = append(b, p...)
		}
		if err := os.WriteFile(filepath.Join(dir, snapshot.MemoryFile), b, 0o600); err != nil {
			t.Fatal(err)
		}
		return Snapshot{Dir: dir}
	}
	d := t.TempDir()
	clean := write(filepath.Join(d, "clean"), page(1), page(1), page(0), page(1), page(1))
	warm := write(filepath.Join(d, "warm"), page(1), page(0), page(0), page(2), page(0))
	got, err := freedSinceClean(clean, warm, []uint64{4, 0, 1, 2, 3}, []uint64{9})
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{9, 4, 1}; !reflect.DeepEqual(got, want) {
		t.Errorf("freed %v, want %v", got, want)
	}
	if _, err := freedSinceClean(Snapshot{Dir: filepath.Join(d, "none")}, warm, []uint64{0}, nil); err == nil {
		t.Error("missing clean memory: no error")
	}
}

// TestLoaderExtents: concurrent paging reads the loading regions in address
// order (adjacent ones as one read), per-region mapping in file (group)
// order, the others the loading-set file.
func TestLoaderExtents(t *testing.T) {
	art := &memlayout.FaaSnapArtifact{LoadingRegions: []memlayout.LSRegion{
		{Start: 10, Pages: 2, Group: 0}, {Start: 2, Pages: 3, Group: 1, FileOff: 8192}, {Start: 5, Pages: 1, Group: 2, FileOff: 20480}}}
	ps := int64(snapshot.PageSize)
	if got, want := loaderExtents(art, VariantConcurrent), []Extent{{Off: 2 * ps, Len: 4 * ps}, {Off: 10 * ps, Len: 2 * ps}}; !reflect.DeepEqual(got, want) {
		t.Errorf("concurrent: %v, want %v", got, want)
	}
	if got, want := loaderExtents(art, VariantNoLoadingSet), []Extent{{Off: 10 * ps, Len: 2 * ps}, {Off: 2 * ps, Len: 3 * ps}, {Off: 5 * ps, Len: ps}}; !reflect.DeepEqual(got, want) {
		t.Errorf("no-loadingset: %v, want %v", got, want)
	}
	for _, v := range []string{"", VariantNoMerge, VariantNoFreedFilter, VariantNoHostRecording} {
		if got := loaderExtents(art, v); got != nil {
			t.Errorf("%q reads extents %v, want the loading-set file", v, got)
		}
	}
}

// The record VM's own copy lets QEMU's punches of reported free pages
// through (they make freed pages holes in the warm memory), holds readahead
// off (steady recordings) and still drops the huge-page hint unless asked;
// restores never let punches through nor hold readahead off.
func TestRecordMemoryPassesPunches(t *testing.T) {
	r := &faasnapRecord{memPath: "/run/vm/memory"}
	m := r.Memory()
	env, err := qemu.InterposerEnv(m, t.TempDir())
	if err != nil || !m.Shared || !m.File.KeepIntact || !m.File.PunchFreed || m.File.HugePages ||
		!slices.Contains(env, "THAW_SHIM_PUNCH=pass") || !slices.Contains(env, "THAW_SHIM_READAHEAD=off") {
		t.Errorf("record memory %+v", m)
	}
	v, _ := beginVanilla(Snapshot{Dir: t.TempDir()}, Env{}, "")
	if v.Memory().File.PunchFreed || v.Memory().File.NoReadahead {
		t.Error("a restore lets punches into the snapshot's memory through, or holds its readahead off")
	}
}
