package restore_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/thaw-dev/thaw/internal/pagecache"
	"github.com/thaw-dev/thaw/internal/restore"
	"github.com/thaw-dev/thaw/internal/restore/lazytest"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// The lazy strategies through the real interposer and fault server, with
// the memory file replaced by a placeholder and its bytes served by a
// source: every page equals the memory file's, the placeholder is never
// read (nothing of it in the page cache) nor written (still all holes), and
// the other strategies refuse.

// lazySnap is a synthetic snapshot (the conformance suite's) seen from a
// host that lacks its memory file.
func lazySnap(t *testing.T, s restore.Snapshot, delay time.Duration) (restore.Snapshot, *lazytest.Source) {
	t.Helper()
	src, err := lazytest.Open(s.MemoryPath(), delay)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { src.Close() })
	ph := filepath.Join(t.TempDir(), "memory.placeholder")
	if err := lazytest.Placeholder(ph, src.Size()); err != nil {
		t.Fatal(err)
	}
	s.Source, s.MemFile = src, ph
	return s, src
}

type lazyCheck struct {
	Pages        int  `json:"pages"`
	Mismatches   int  `json:"mismatches"`
	FileModified bool `json:"file_modified"`
}

func shimBuild(t *testing.T) string { return filepath.Join(restore.ShimDir(t), "build") }

// checkCmd maps the session's memory as QEMU does and compares every page
// with want.
func checkCmd(ctx context.Context, t *testing.T, build string, sess restore.Session, want string) *exec.Cmd {
	t.Helper()
	mem := sess.Memory()
	env, err := qemu.InterposerEnv(mem, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(build, "thaw-shim-check"), "--threads", "4", "--expect", want, mem.Path)
	cmd.Env = append(append(os.Environ(), "LD_PRELOAD="+filepath.Join(build, "libthaw_shim.so")), env...)
	return cmd
}

func TestLazyConformance(t *testing.T) {
	build := shimBuild(t)
	const pages = 4099
	base := restore.NewSynthSnapshot(t, pages, 17)
	for _, k := range restore.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			snap, src := lazySnap(t, base.Snap, 2*time.Millisecond)
			env := restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders()}
			st, _ := restore.Lookup(k)
			sess, err := restore.Begin(context.Background(), k, snap, env)
			if !st.Lazy {
				var nl *restore.NeedsLocalError
				if err == nil || !errors.As(err, &nl) || !errors.Is(err, restore.ErrNeedsLocalMemory) || nl.Kind != k ||
					!strings.Contains(err.Error(), "pull the snapshot first") {
					t.Fatalf("%s with a memory source: %v, want a NeedsLocalError", k, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if sess.Kind() != k || sess.Memory().Path != snap.MemFile {
				t.Fatalf("ran as %s on %s", sess.Kind(), sess.Memory().Path)
			}
			out, err := checkCmd(context.Background(), t, build, sess, base.Snap.MemoryPath()).Output()
			var res lazyCheck
			if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil || res.Pages != pages || res.Mismatches != 0 || res.FileModified {
				t.Fatalf("check: %v %v %s", err, jerr, out)
			}
			if fi, err := os.Stat(snap.MemFile); err != nil || fi.Size() != src.Size() || !allHoles(t, snap.MemFile) {
				t.Fatalf("placeholder changed: %v %v", fi, err)
			}
			if resident := residentPages(t, snap.MemFile); resident != 0 {
				t.Errorf("placeholder has %d pages in the page cache: it was read", resident)
			}
			stats := sess.Stats()
			var reap restore.REAPStats
			var fs restore.FaaSnapStats
			stats.PartAs(string(restore.REAP), &reap)
			stats.PartAs(string(restore.FaaSnap), &fs)
			t.Logf("%s: %+v", k, stats.LazyStats)
			if !stats.Lazy || stats.SourceFaults == 0 || stats.SourceBytes == 0 || stats.SourceFetchedChunks == 0 {
				t.Fatalf("lazy stats %+v", stats.LazyStats)
			}
			switch k {
			case restore.Vanilla:
				if stats.SourceFaults != pages || stats.SourceBytes != uint64(src.Size()) {
					t.Errorf("vanilla read %d pages (%d bytes) from the source, want all %d", stats.SourceFaults, stats.SourceBytes, pages)
				}
			case restore.REAP:
				if reap.PrefetchPages != uint64(len(base.Order)) || stats.SourceFaults != uint64(pages-len(base.Order)) {
					t.Errorf("reap prefetched %d, read %d from the source; working set %d of %d", reap.PrefetchPages, stats.SourceFaults, len(base.Order), pages)
				}
			case restore.FaaSnap:
				ls := stats.LoaderPages + stats.LoaderExisting
				if ls == 0 || fs.LoaderBytes != ls*4096 || stats.SourceFaults+stats.ZeroFaults+stats.LoadingSetFaults+stats.LoaderPages < pages {
					t.Errorf("faasnap stats %+v", stats)
				}
				if stats.ZeroFaults == 0 || stats.SourceFaults >= pages-stats.LoaderPages {
					t.Errorf("faasnap read %d pages from the source, %d known zero, %d loaded", stats.SourceFaults, stats.ZeroFaults, stats.LoaderPages)
				}
			}
		})
	}
}

// A lazy REAP restore streams its working set from a source too: every
// page still matches, the working set came from that source, and a source
// of the wrong size or one that fails is refused with an error naming it.
func TestLazyREAPRemoteWorkingSet(t *testing.T) {
	build := shimBuild(t)
	const pages = 2051
	base := restore.NewSynthSnapshot(t, pages, 19)
	wsPath := filepath.Join(base.Snap.ArtifactDir(restore.REAP), restore.REAPWorkingSetFile)
	for _, tc := range []struct{ name, wantErr string }{{"ok", ""}, {"wrong size", "working-set source holds"}, {"failing", "prefetch working set"}} {
		t.Run(tc.name, func(t *testing.T) {
			snap, _ := lazySnap(t, base.Snap, time.Millisecond)
			path := wsPath
			if tc.name == "wrong size" {
				path = filepath.Join(t.TempDir(), "short")
				if err := os.WriteFile(path, make([]byte, 3*4096), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ws, err := lazytest.Open(path, time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer ws.Close()
			if tc.name == "failing" {
				ws.Fail()
			}
			snap.Remote = map[string]restore.MemorySource{restore.ArtifactPath(restore.REAP, restore.REAPWorkingSetFile): ws}
			env := restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders()}
			sess, err := restore.Begin(context.Background(), restore.REAP, snap, env)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			if tc.name == "wrong size" { // REAP falls back to vanilla, saying why
				if fb := sess.Stats().Fallback; sess.Kind() != restore.Vanilla || !strings.Contains(fb, tc.wantErr) {
					t.Fatalf("ran as %s, fallback %q, want vanilla because %q", sess.Kind(), fb, tc.wantErr)
				}
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := checkCmd(ctx, t, build, sess, base.Snap.MemoryPath())
			if tc.name == "failing" {
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer func() { cmd.Process.Kill(); cmd.Wait() }()
				if err := sess.Started(ctx, cmd.Process.Pid); err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, lazytest.ErrFetch) {
					t.Fatalf("started: %v, want %q", err, tc.wantErr)
				}
				return
			}
			out, err := cmd.Output()
			var res lazyCheck
			if jerr := json.Unmarshal(out, &res); jerr != nil || err != nil || res.Pages != pages || res.Mismatches != 0 {
				t.Fatalf("check: %v %v %s", err, jerr, out)
			}
			var st restore.REAPStats
			sess.Stats().PartAs(string(restore.REAP), &st)
			if st.PrefetchPages != uint64(len(base.Order)) || ws.ReadCalls() == 0 || ws.SourceStats().FetchedChunks == 0 {
				t.Errorf("prefetched %d of %d pages, working-set source read %d times (%d chunks)", st.PrefetchPages, len(base.Order), ws.ReadCalls(), ws.SourceStats().FetchedChunks)
			}
		})
	}
}

// A source that fails while the guest runs ends the session with an error
// that says so (the daemon then kills the VM) instead of a hung guest.
func TestLazySourceFailure(t *testing.T) {
	build := shimBuild(t)
	base := restore.NewSynthSnapshot(t, 1000, 18)
	for _, k := range []restore.Kind{restore.Vanilla, restore.REAP, restore.FaaSnap} {
		t.Run(string(k), func(t *testing.T) {
			snap, src := lazySnap(t, base.Snap, 0)
			src.Fail()
			env := restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders()}
			sess, err := restore.Begin(context.Background(), k, snap, env)
			if err != nil {
				t.Fatal(err)
			}
			defer sess.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := checkCmd(ctx, t, build, sess, base.Snap.MemoryPath())
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if err := sess.Started(ctx, cmd.Process.Pid); err != nil {
				t.Fatalf("started: %v", err)
			}
			select {
			case err := <-sess.Failed():
				if !errors.Is(err, lazytest.ErrFetch) || !strings.Contains(err.Error(), "memory source") {
					t.Fatalf("failure %v does not name the source", err)
				}
				t.Logf("%s: %v", k, err)
			case <-ctx.Done():
				t.Fatal("the session never reported the source's failure")
			}
			cmd.Process.Kill() // what the daemon does with the VM
			cmd.Wait()
		})
	}
}

// A source or placeholder of the wrong size is refused before QEMU starts.
func TestLazyRefusesWrongSize(t *testing.T) {
	base := restore.NewSynthSnapshot(t, 300, 19)
	snap, _ := lazySnap(t, base.Snap, 0)
	if err := os.Truncate(snap.MemFile, 4096); err != nil {
		t.Fatal(err)
	}
	env := restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders()}
	if _, err := restore.Begin(context.Background(), restore.Vanilla, snap, env); err == nil || !strings.Contains(err.Error(), "placeholder") {
		t.Fatalf("short placeholder: %v", err)
	}
	other := restore.NewSynthSnapshot(t, 299, 20)
	snap2, _ := lazySnap(t, other.Snap, 0)
	snap2.Manifest = base.Snap.Manifest
	if _, err := restore.Begin(context.Background(), restore.REAP, snap2, env); err == nil || !strings.Contains(err.Error(), "memory source holds") {
		t.Fatalf("source of another size: %v", err)
	}
}

func residentPages(t *testing.T, path string) int {
	t.Helper()
	n, _, err := pagecache.Resident(path)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Prepare's record restores need the memory file: they refuse a source.
func TestRecordRefusesSource(t *testing.T) {
	base := restore.NewSynthSnapshot(t, 300, 21)
	snap, src := lazySnap(t, base.Snap, 0)
	env := restore.Env{RunDir: t.TempDir(), Loaders: restore.NewLoaders()}
	called := false
	_, err := restore.LocalOnly(func(context.Context, restore.Snapshot, restore.Env) (restore.Session, error) {
		called = true
		return nil, nil
	})(context.Background(), snap, env)
	if !errors.Is(err, restore.ErrNeedsLocalMemory) || called || src.ReadCalls() != 0 {
		t.Fatalf("record with a memory source: %v (began %v)", err, called)
	}
}

func allHoles(t *testing.T, path string) bool {
	t.Helper()
	ok, err := lazytest.AllHoles(path)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}
