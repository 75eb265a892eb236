// Package synth makes what restore tests restore and check against:
// synthetic memory files, the interposer built from the repository, and
// its checker, which maps a restored memory exactly as QEMU does and
// compares every page with the memory file. It does not know strategies
// (package restoretest runs them).
package synth

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/thaw-dev/thaw/internal/snapshot"
	"github.com/thaw-dev/thaw/internal/store"
	"github.com/thaw-dev/thaw/internal/vmm"
	"github.com/thaw-dev/thaw/internal/vmm/qemu"
)

// ShimDir builds the interposer and its checker (shim/) and returns the
// directory; they are in its build/.
func ShimDir(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "..", "shim")
	if out, err := exec.Command("make", "-s", "-C", dir).CombinedOutput(); err != nil {
		t.Fatalf("build interposer: %v\n%s", err, out)
	}
	return dir
}

// ShimLib is the interposer's library in shim, a ShimDir.
func ShimLib(shim string) string { return filepath.Join(shim, "build", "libthaw_shim.so") }

// Memory writes a memory file of pages pages: random data pages, runs of
// explicit zero pages and holes.
func Memory(t testing.TB, path string, pages int, rng *rand.Rand) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, snapshot.PageSize)
	for p := 0; p < pages; {
		run := 1 + rng.Intn(40)
		kind := rng.Intn(3) // 0 data, 1 written zeros, 2 hole
		for i := 0; i < run && p < pages; i, p = i+1, p+1 {
			switch kind {
			case 0:
				rng.Read(buf)
			case 1:
				clear(buf)
			case 2:
				continue
			}
			if _, err := f.WriteAt(buf, int64(p)*snapshot.PageSize); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := f.Truncate(int64(pages) * snapshot.PageSize); err != nil {
		t.Fatal(err)
	}
}

// Synth is a synthetic snapshot's memory: its directory holding the
// memory file, a manifest naming it, a working set of a third of its pages
// (in "access" order) and a memory store holding a copy.
type Synth struct {
	Dir      string
	Manifest *snapshot.Manifest
	Order    []uint64
	Store    *store.Store
}

// NewMemory builds a synthetic snapshot's memory of pages pages from seed.
func NewMemory(t testing.TB, pages int, seed int64) Synth {
	t.Helper()
	rng := rand.New(rand.NewSource(seed))
	dir := t.TempDir()
	mem := filepath.Join(dir, snapshot.MemoryFile)
	Memory(t, mem, pages, rng)
	fi, err := snapshot.HashFile(mem)
	if err != nil {
		t.Fatal(err)
	}
	s := Synth{Dir: dir, Manifest: &snapshot.Manifest{ID: fmt.Sprintf("snap-synth%d", seed), Files: map[string]snapshot.FileInfo{snapshot.MemoryFile: fi}}}
	sdir, err := os.MkdirTemp("/dev/shm", "thaw-conformance-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sdir) })
	if s.Store, err = store.Open(sdir); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Store.Put(s.Manifest.ID, mem, fi); err != nil {
		t.Fatal(err)
	}
	seen := map[uint64]bool{}
	for len(s.Order) < pages/3 {
		p := uint64(rng.Intn(pages))
		if !seen[p] {
			seen[p] = true
			s.Order = append(s.Order, p)
		}
	}
	return s
}

// Result is what the checker found.
type Result struct {
	Pages         int   `json:"pages"`
	Mismatches    int   `json:"mismatches"`
	FirstMismatch int64 `json:"first_mismatch"`
	FileModified  bool  `json:"file_modified"`
	HugePageHint  bool  `json:"hugepage_hint"` // with --qemu-madvise: the hint QEMU gives stayed
}

// Check maps mem (a restore's memory description) like QEMU under the
// interposer of shim (configured as the QEMU backend configures it) and compares every page with the memory file; extra
// goes to the checker (--standby MS: read only after waiting, as a VMM of
// the VMM pool does).
func Check(t testing.TB, shim string, mem vmm.Memory, extra ...string) Result {
	t.Helper()
	if !mem.File.KeepIntact {
		t.Fatalf("memory not protected from QEMU's discards: %+v", mem)
	}
	args := append([]string{"--threads", "4", "--write-check"}, extra...)
	if mem.Align > 0 {
		args = append(args, "--align", fmt.Sprint(mem.Align))
	}
	cmd := exec.Command(filepath.Join(shim, "build", "thaw-shim-check"), append(args, mem.Path)...)
	env, err := qemu.InterposerEnv(mem, t.TempDir())
	if err != nil {
		t.Fatalf("interposer: %v", err)
	}
	cmd.Env = append(append(os.Environ(), "LD_PRELOAD="+ShimLib(shim)), env...)
	out, err := cmd.Output()
	var res Result
	if jerr := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &res); jerr != nil {
		t.Fatalf("check: %v %v: %s", err, jerr, out)
	}
	if err != nil && res.Mismatches == 0 && !res.FileModified {
		t.Fatalf("check failed: %v", err)
	}
	return res
}
