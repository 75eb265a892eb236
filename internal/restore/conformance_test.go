package restore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/memlayout"
	"github.com/thaw-dev/thaw/internal/restore/restoretest/synth"
	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
)

// The built-in strategies' own conformance cases, beyond the suite every
// strategy passes (restoretest.Suite, run by suite_test.go): the huge-page
// hint, a damaged artifact the check must see, fallbacks on damaged
// artifacts, premap on a device, faasnap's variants. Each restores a
// synthetic memory file through the interposer inside a process that maps
// guest memory exactly as QEMU does and compares every page.

func shimDir(t *testing.T) string { return synth.ShimDir(t) }

type synthSnapshot struct {
	snap  Snapshot
	order []uint64     // a working set, in "access" order
	store *store.Store // holding the memory file (premap)
}

// newSynth is a synthetic snapshot with every built-in strategy's
// artifacts.
func newSynth(t *testing.T, pages int, seed int64) synthSnapshot {
	m := synth.NewMemory(t, pages, seed)
	s := synthSnapshot{snap: Snapshot{Dir: m.Dir, Manifest: m.Manifest}, order: m.Order, store: m.Store}
	writeArtifacts(t, s.snap, s.order)
	return s
}

// writeArtifacts writes every built-in strategy's artifacts of snap from
// the working set order.
func writeArtifacts(t *testing.T, snap Snapshot, order []uint64) {
	t.Helper()
	mem, sum := snap.MemoryPath(), memSHA(snap)
	s := synthSnapshot{snap: snap, order: order}
	pages := int(memSize(snap) / snapshot.PageSize)
	if _, err := memlayout.WriteFaaSnap(s.snap.ArtifactDir(FaaSnap), mem, sum, s.order,
		memlayout.FaaSnapOptions{GroupSize: 64, MergeGap: 8}); err != nil {
		t.Fatal(err)
	}
	if _, err := memlayout.WriteREAP(s.snap.ArtifactDir(REAP), mem, sum, s.order); err != nil {
		t.Fatal(err)
	}
	writeVariants(t, s, mem, sum, pages)
	// The capture itself needs a kernel (internal/snapbpf tests it); the
	// prefetch plan is built from the same synthetic working set.
	if _, err := memlayout.WriteSnapBPF(s.snap.ArtifactDir(SnapBPF), mem, sum, s.order, uint64(len(s.order)), 0); err != nil {
		t.Fatal(err)
	}
}

// runCheck maps the session's memory like QEMU and compares every page.
func runCheck(t *testing.T, shim string, sess Session, extra ...string) synth.Result {
	t.Helper()
	return synth.Check(t, shim, sess.Memory(), extra...)
}

// QEMU's MADV_HUGEPAGE on guest RAM is dropped by every strategy's restore
// unless the restore keeps it (Env.HugePages), and the memory is the same
// either way.
func TestHugePageHint(t *testing.T) {
	shim := shimDir(t)
	s := newSynth(t, 1000, 7)
	for _, k := range Kinds() {
		for _, keep := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/keep=%v", k, keep), func(t *testing.T) {
				env := Env{RunDir: t.TempDir(), Loaders: NewLoaders(),
					Store: s.store, HugePages: keep}
				sess, err := Begin(context.Background(), k, s.snap, env)
				if err != nil {
					t.Fatal(err)
				}
				defer sess.Close()
				if sess.Memory().File.HugePages != keep {
					t.Fatalf("memory %+v does not carry the choice %v", sess.Memory(), keep)
				}
				res := runCheck(t, shim, sess, "--qemu-madvise")
				if res.Mismatches != 0 || res.FileModified {
					t.Fatalf("%+v", res)
				}
				if res.HugePageHint != keep {
					t.Fatalf("hint on guest RAM after QEMU's madvise: %v, want %v", res.HugePageHint, keep)
				}
			})
		}
	}
}

// TestConformanceDetectsWrongLayout proves the check can fail: a loading-set
// file whose bytes were changed behind the verifier's back (its stamp
// restored as trusted) makes pages differ.
func TestConformanceDetectsWrongLayout(t *testing.T) {
	shim := shimDir(t)
	s := newSynth(t, 1000, 7)
	ls := filepath.Join(s.snap.ArtifactDir(FaaSnap), FaaSnapLoadingSet)
	b, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	b[100] ^= 0xff
	if err := os.WriteFile(ls, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := snapshot.Trust(ls); err != nil { // pretend it was verified
		t.Fatal(err)
	}
	env := Env{RunDir: t.TempDir(), Loaders: NewLoaders(), Store: s.store}
	sess, err := Begin(context.Background(), FaaSnap, s.snap, env)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	if res := runCheck(t, shim, sess); res.Mismatches == 0 {
		t.Fatal("a corrupted loading-set file went unnoticed by the check")
	}
}

// TestFallbackOnDamagedArtifacts: without verified artifacts, reap and
// faasnap run as vanilla and say why.
func TestFallbackOnDamagedArtifacts(t *testing.T) {
	shim := shimDir(t)
	s := newSynth(t, 300, 3)
	ws := filepath.Join(s.snap.ArtifactDir(REAP), REAPWorkingSetFile)
	if err := os.Truncate(ws, 4096); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.snap.ArtifactDir(FaaSnap), FaaSnapManifest)); err != nil {
		t.Fatal(err)
	}
	sb := filepath.Join(s.snap.ArtifactDir(SnapBPF), SnapBPFManifest)
	b, err := os.ReadFile(sb)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x5a
	if err := os.WriteFile(sb, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := s.store.Remove(s.snap.Manifest.ID); err != nil {
		t.Fatal(err)
	}
	for _, k := range []Kind{REAP, FaaSnap, Premap, SnapBPF} {
		env := Env{RunDir: t.TempDir(), Loaders: NewLoaders(), Store: s.store}
		sess := beginFallback(t, k, s.snap, env, string(k))
		if res := runCheck(t, shim, sess); res.Mismatches != 0 {
			t.Fatalf("fallback restore differs: %+v", res)
		}
		sess.Close()
	}
}

// TestPremapDamagedStoreCopy: a store copy whose bytes changed after it was
// stored is refused (premap runs as vanilla and says why).
func TestPremapDamagedStoreCopy(t *testing.T) {
	s := newSynth(t, 300, 11)
	e, err := s.store.Get(s.snap.Manifest.ID)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(e.Path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0x5a}, 4096*7+9); err != nil {
		t.Fatal(err)
	}
	f.Close()
	env := Env{RunDir: t.TempDir(), Loaders: NewLoaders(), Store: s.store}
	beginFallback(t, Premap, s.snap, env, "damaged").Close()
}

// beginFallback begins a restore of kind k that must run as vanilla and
// say why: its fallback reason contains why.
func beginFallback(t *testing.T, k Kind, snap Snapshot, env Env, why string) Session {
	t.Helper()
	sess, err := Begin(context.Background(), k, snap, env)
	if err != nil {
		t.Fatalf("%s: %v", k, err)
	}
	if sess.Kind() != Vanilla || !strings.Contains(sess.Stats().Fallback, why) {
		sess.Close()
		t.Fatalf("%s: ran as %s, fallback %q; want vanilla, %q", k, sess.Kind(), sess.Stats().Fallback, why)
	}
	return sess
}

// TestShimScript runs the interposer's own test script (shim/test.sh):
// every layout, uffd, device and protection case against thaw-shim-check.
func TestShimScript(t *testing.T) {
	shim := shimDir(t)
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("shim/test.sh needs python3")
	}
	out, err := exec.Command("bash", filepath.Join(shim, "test.sh")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ALL PASS") {
		t.Fatalf("shim/test.sh: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "FAIL") {
			t.Error(line)
		}
	}
}

// TestPremapDevice: premap over a device store (a file on tmpfs stands in
// for /dev/daxX.Y; scripts/dax-guest.sh runs the store on a real one).
// Each restore gets its own range of the device, filled from the stored
// copy and mapped shared: what QEMU's mapping reads equals the memory file,
// guest writes land in the VM's range only, and the range goes back to the
// store when the session closes. A full device and a damaged copy fall back
// to vanilla and say why.
func TestPremapDevice(t *testing.T) {
	shim := shimDir(t)
	const pages = 4096 // 16 MiB: whole 2 MiB units
	s := newSynth(t, pages, 11)
	dev, st, e := premapDeviceStore(t, s)
	env := func(vm string) Env {
		return Env{RunDir: t.TempDir(), Loaders: NewLoaders(), Store: st, VMID: vm}
	}
	open := beginPremapClones(t, shim, s, e, pages, env)
	// The guests wrote into their ranges; the stored copy is intact.
	if err := st.Verify(e); err != nil {
		t.Fatal(err)
	}
	// No room for a third clone: vanilla, saying why.
	third, err := Begin(context.Background(), Premap, s.snap, env("vm-000000000003"))
	if err != nil || third.Kind() != Vanilla || !strings.Contains(third.Stats().Fallback, "full") {
		t.Fatalf("third clone on a full device: %v %s %q", err, third.Kind(), third.Stats().Fallback)
	}
	for _, sess := range open {
		if err := sess.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if got := st.Clones(); len(got) != 0 {
		t.Fatalf("ranges not released: %v", got)
	}
	in, _ := st.Info()
	if in.ReservedBytes != 0 || in.FreeBytes != 2*(16<<20) {
		t.Fatalf("store after closing %+v", in)
	}
	checkDamagedDeviceCopy(t, dev, st, s, e, env)
}

// premapDeviceStore makes a device store (a file on /dev/shm) with room
// for the index, the copy of s's memory and two clones, and puts the copy
// on it.
func premapDeviceStore(t *testing.T, s synthSnapshot) (*os.File, *store.Store, *store.Entry) {
	t.Helper()
	mem := s.snap.MemoryPath()
	fi := s.snap.Manifest.Files[snapshot.MemoryFile]
	dev, err := os.CreateTemp("/dev/shm", "thaw-conformance-dev-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(dev.Name()) })
	if err := dev.Truncate(2<<20 + 3*(16<<20)); err != nil { // index + the copy + two clones
		t.Fatal(err)
	}
	dev.Close()
	st, err := store.OpenDeviceFile(dev.Name(), 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e, err := st.Put(s.snap.Manifest.ID, mem, fi)
	if err != nil {
		t.Fatal(err)
	}
	return dev, st, e
}

// beginPremapClones restores two clones from the device store and checks
// each runs as premap, reads the memory file and reports its range.
func beginPremapClones(t *testing.T, shim string, s synthSnapshot, e *store.Entry, pages uint64, env func(string) Env) []Session {
	t.Helper()
	mem := s.snap.MemoryPath()
	var open []Session
	for _, vm := range []string{"vm-000000000001", "vm-000000000002"} {
		sess, err := Begin(context.Background(), Premap, s.snap, env(vm))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, sess)
		if sess.Kind() != Premap || sess.Stats().Fallback != "" {
			t.Fatalf("%s: ran as %s: %s", vm, sess.Kind(), sess.Stats().Fallback)
		}
		if m := sess.Memory(); m.Align != 2<<20 || m.Path != mem {
			t.Fatalf("%s: memory %+v: want the snapshot's file placed on 2 MiB", vm, m)
		}
		res := runCheck(t, shim, sess)
		if res.Mismatches != 0 || res.FileModified {
			t.Fatalf("%s: %+v", vm, res)
		}
		var stt PremapStats
		all := sess.Stats()
		all.PartAs(string(Premap), &stt)
		if stt.DeviceBytes != uint64(e.Bytes) || stt.PopulatedBytes != pages*snapshot.PageSize || stt.StoreBytes != uint64(e.Bytes) {
			t.Fatalf("%s: stats %+v", vm, stt)
		}
		t.Logf("%s: %d MiB range filled in %.2f ms, %d entries, populated in %.2f ms", vm, stt.DeviceBytes>>20, stt.CloneCopyMS, all.LayoutEntries, stt.PopulateMS)
	}
	return open
}

// checkDamagedDeviceCopy damages the copy on the device (found when a
// daemon first uses it): a restore falls back to vanilla and keeps no
// range.
func checkDamagedDeviceCopy(t *testing.T, dev *os.File, st *store.Store, s synthSnapshot, e *store.Entry, env func(string) Env) {
	t.Helper()
	st.Close()
	f, err := os.OpenFile(dev.Name(), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0x5a, 0xa5}, e.DeviceOffset+4096*7+11)
	f.Close()
	st2, err := store.OpenDeviceFile(dev.Name(), 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st2.Close() })
	e4 := env("vm-000000000004")
	e4.Store = st2
	defer beginFallback(t, Premap, s.snap, e4, "damaged").Close()
	if got := st2.Clones(); len(got) != 0 {
		t.Fatalf("a refused restore kept a range: %v", got)
	}
}

// writeVariants builds faasnap's technique-off artifacts of s: another
// working set (the guest's faults), some pages counted as freed, no merging.
func writeVariants(t *testing.T, s synthSnapshot, mem, sum string, pages int) {
	t.Helper()
	faulted := slices.Clone(s.order[:len(s.order)/2])
	slices.Reverse(faulted)
	freed := []uint64{0, uint64(pages / 2), uint64(pages - 1)}
	for v, o := range map[string]struct {
		order []uint64
		opts  memlayout.FaaSnapOptions
	}{
		VariantNoHostRecording: {faulted, memlayout.FaaSnapOptions{GroupSize: 64, MergeGap: 8}},
		VariantNoFreedFilter:   {s.order, memlayout.FaaSnapOptions{GroupSize: 64, MergeGap: 8, Freed: freed}},
		VariantNoMerge:         {s.order, memlayout.FaaSnapOptions{GroupSize: 64, MergeGap: -1}},
	} {
		if _, err := memlayout.WriteFaaSnap(faasnapArtifactDir(s.snap, v), mem, sum, o.order, o.opts); err != nil {
			t.Fatal(err)
		}
	}
}

// Every faasnap variant restores guest memory byte-exact through the
// interposer, and its loader reads what the variant says.
func TestConformanceVariants(t *testing.T) {
	shim := shimDir(t)
	const pages = 1000
	s := newSynth(t, pages, 77)
	full, err := memlayout.ReadFaaSnap(s.snap.ArtifactDir(FaaSnap))
	if err != nil {
		t.Fatal(err)
	}
	lsBytes := uint64(full.LoadingSetFile.Size)
	for _, v := range FaaSnapVariants {
		t.Run(v, func(t *testing.T) {
			env := Env{RunDir: t.TempDir(), Loaders: NewLoaders(), Variant: v}
			sess, err := Begin(context.Background(), FaaSnap, s.snap, env)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			var fs FaaSnapStats
			if st := sess.Stats(); sess.Kind() != FaaSnap || st.Fallback != "" || !st.PartAs(string(FaaSnap), &fs) || fs.Variant != v {
				t.Fatalf("ran as %s variant %q: %s", sess.Kind(), fs.Variant, st.Fallback)
			}
			res := runCheck(t, shim, sess)
			if res.Pages != pages || res.Mismatches != 0 || res.FileModified {
				t.Fatalf("%s: %+v", v, res)
			}
			f := sess.(*faasnap)
			<-f.load.Done()
			if err := f.load.Err(); err != nil {
				t.Fatal(err)
			}
			switch v {
			case VariantConcurrent: // the memory file mapped whole: no layout
				if m := sess.Memory(); m.Backing.Layout != nil || sess.Stats().LayoutEntries != 0 {
					t.Errorf("concurrent paging maps a layout: %+v", m.Backing)
				}
				if f.load.Bytes() != lsBytes {
					t.Errorf("loader read %d bytes of the memory file, want the loading set's %d", f.load.Bytes(), lsBytes)
				}
			case VariantNoLoadingSet: // memory-file entries only, same bytes read
				if m := sess.Memory(); m.Backing.Layout == nil || m.Backing.Layout.LoadingSet != "" || sess.Stats().LayoutEntries != len(full.NonzeroRegions) {
					t.Errorf("per-region mapping uses the loading-set file: %+v, %d entries", m.Backing, sess.Stats().LayoutEntries)
				}
				if f.load.Bytes() != lsBytes {
					t.Errorf("loader read %d bytes, want %d", f.load.Bytes(), lsBytes)
				}
			default: // its own artifact's loading-set file
				if f.lsPath != filepath.Join(s.snap.ArtifactDir(FaaSnap), "variants", v, FaaSnapLoadingSet) {
					t.Errorf("loading set %s", f.lsPath)
				}
			}
		})
	}
}

// A variant the strategy lacks is refused; a variant without artifacts
// falls back to vanilla and says why.
func TestVariantRefusedOrFallsBack(t *testing.T) {
	s := newSynth(t, 257, 3)
	env := Env{RunDir: t.TempDir(), Loaders: NewLoaders()}
	for _, c := range []struct {
		k Kind
		v string
	}{{FaaSnap, "no-such"}, {REAP, VariantNoMerge}, {Vanilla, VariantConcurrent}} {
		env.Variant = c.v
		if sess, err := Begin(context.Background(), c.k, s.snap, env); err == nil {
			sess.Close()
			t.Errorf("%s variant %s accepted", c.k, c.v)
		}
	}
	if err := os.RemoveAll(faasnapArtifactDir(s.snap, VariantNoMerge)); err != nil {
		t.Fatal(err)
	}
	env.Variant = VariantNoMerge // its artifact is missing
	beginFallback(t, FaaSnap, s.snap, env, "faasnap artifacts unusable").Close()
}
