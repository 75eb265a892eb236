package snapshot

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/thaw-dev/thaw/internal/dirtest"
)

const mib = 1 << 20

// segKind is what one run of a synthetic memory file holds.
type segKind int

const (
	random  segKind = iota // random bytes (non-zero pages)
	zeros                  // zero bytes actually written: allocated, but all-zero pages
	hole                   // never written: a hole
	oneByte                // pages that are zero except for one byte (first page: first byte, others: last byte)
)

type segment struct {
	kind  segKind
	bytes int64
}

// writeMemoryFile creates path with the given layout and returns its
// content. Holes are left by seeking past them (WriteAt beyond the end) and
// by a final Truncate for a trailing hole, as a guest that never touched
// that RAM would leave them.
func writeMemoryFile(t *testing.T, path string, seed uint64, segs []segment) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var content []byte
	for _, s := range segs {
		b := make([]byte, s.bytes)
		switch s.kind {
		case random:
			for i := range b {
				b[i] = byte(rng.UintN(256))
			}
			// Make sure no page of a random run is all zeros by accident.
			for p := 0; p < len(b); p += PageSize {
				b[p] |= 1
			}
		case oneByte:
			for p := 0; p < len(b); p += PageSize {
				if p == 0 {
					b[p] = 0xff
				} else {
					b[min(p+PageSize, len(b))-1] = 0x01
				}
			}
		}
		if s.kind != hole {
			if _, err := f.WriteAt(b, int64(len(content))); err != nil {
				t.Fatal(err)
			}
		}
		content = append(content, b...)
	}
	if err := f.Truncate(int64(len(content))); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return content
}

// nonZeroBytes counts the bytes of the pages of b that are not all zero (the
// last page may be partial): what CopySparse must report as allocated.
func nonZeroBytes(b []byte) (pages int, n int64) {
	for p := 0; p < len(b); p += PageSize {
		page := b[p:min(p+PageSize, len(b))]
		if bytes.ContainsFunc(page, func(r rune) bool { return r != 0 }) {
			pages++
			n += int64(len(page))
		}
	}
	return pages, n
}

func blocksBytes(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Blocks * 512
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var memoryLayouts = []struct {
	name      string
	segs      []segment
	wantHoles bool // the source must really be sparse, or the test proves less than it claims
}{
	{
		name: "pages, written zeros and holes interleaved, size a multiple of the page size but not of 1 MiB",
		segs: []segment{
			{random, 3 * PageSize}, {hole, 5 * PageSize}, {zeros, 2 * PageSize}, {random, PageSize},
			{hole, mib + 7*PageSize}, {random, 9 * PageSize}, {zeros, 4 * PageSize}, {oneByte, 3 * PageSize},
			{hole, 40 * PageSize}, {random, PageSize},
		},
		wantHoles: true,
	},
	{
		name: "size not a multiple of the page size, non-zero partial last page",
		segs: []segment{
			{hole, 2 * mib}, {random, 3 * PageSize}, {hole, 6 * PageSize}, {random, 123},
		},
		wantHoles: true,
	},
	{
		name: "size not a multiple of the page size, zero partial last page",
		segs: []segment{
			{random, PageSize}, {hole, mib}, {zeros, 777},
		},
		wantHoles: true,
	},
	{
		name: "non-zero run crossing the 1 MiB copy chunk boundary",
		segs: []segment{
			{hole, mib - 3*PageSize}, {random, 6 * PageSize}, {hole, mib},
		},
		wantHoles: true,
	},
	{
		name: "data starting in the middle of a chunk after a hole",
		segs: []segment{
			{hole, mib + mib/2}, {random, 2 * PageSize}, {zeros, mib}, {random, PageSize},
		},
		wantHoles: true,
	},
	{
		name: "trailing hole after the last data",
		segs: []segment{
			{random, 2 * PageSize}, {hole, 4*mib + 5},
		},
		wantHoles: true,
	},
	{
		name:      "only a hole",
		segs:      []segment{{hole, mib + 7}},
		wantHoles: true,
	},
	{
		name: "dense, no holes and no zero pages",
		segs: []segment{{random, mib + 5*PageSize}},
	},
	{
		name: "allocated zeros only",
		segs: []segment{{zeros, mib}},
	},
	{
		name: "empty file",
		segs: nil,
	},
}

func TestCopySparse(t *testing.T) {
	for i, tt := range memoryLayouts {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
			content := writeMemoryFile(t, src, uint64(i+1), tt.segs)
			size := int64(len(content))
			if tt.wantHoles && size > 0 && blocksBytes(t, src) >= size {
				t.Fatalf("source is not sparse (%d bytes allocated of %d): the test would not exercise holes", blocksBytes(t, src), size)
			}

			fi, err := CopySparse(dst, src)
			if err != nil {
				t.Fatalf("CopySparse: %v", err)
			}

			got, err := os.ReadFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, content) {
				t.Fatalf("copy differs from the source (len %d vs %d)", len(got), len(content))
			}
			if fi.Size != size {
				t.Errorf("Size = %d, want %d", fi.Size, size)
			}
			if want := sha256Hex(content); fi.SHA256 != want {
				t.Errorf("SHA256 = %s, want sha256 of the source %s", fi.SHA256, want)
			}
			// Allocated is 4096 bytes per non-zero page; a non-zero partial
			// last page counts for its length ("bytes actually written").
			pages, wantAlloc := nonZeroBytes(content)
			if fi.Allocated != wantAlloc {
				t.Errorf("Allocated = %d, want %d (%d non-zero pages)", fi.Allocated, wantAlloc, pages)
			}
			if size%PageSize == 0 && fi.Allocated != int64(pages)*PageSize {
				t.Errorf("Allocated = %d, want %d pages x %d", fi.Allocated, pages, PageSize)
			}
			// The copy is sparse: zero pages (holes or written zeros) take no
			// space. Slack covers the partial last page's block and extent
			// tree blocks.
			const slack = 64 << 10
			if onDisk := blocksBytes(t, dst); onDisk > fi.Allocated+slack {
				t.Errorf("destination uses %d bytes on disk, want at most Allocated %d + %d", onDisk, fi.Allocated, slack)
			}
			st, err := os.Stat(dst)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("destination mode %v, want 0600", st.Mode().Perm())
			}
			// Hashing the copy gives the same digest.
			h, err := HashFile(dst)
			if err != nil {
				t.Fatal(err)
			}
			if h.SHA256 != fi.SHA256 || h.Size != fi.Size {
				t.Errorf("HashFile(copy) = %s/%d, CopySparse said %s/%d", h.SHA256, h.Size, fi.SHA256, fi.Size)
			}
		})
	}
}

func TestCopySparseRefusesExistingDestination(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	writeMemoryFile(t, src, 1, []segment{{random, 2 * PageSize}, {hole, PageSize}})
	old := []byte("existing snapshot memory")
	if err := os.WriteFile(dst, old, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := CopySparse(dst, src); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CopySparse onto an existing file = %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(dst); !bytes.Equal(got, old) {
		t.Fatalf("existing destination was modified: %q", got)
	}
}

func TestCopySparseMissingSource(t *testing.T) {
	dir := t.TempDir()
	dst := filepath.Join(dir, "dst")
	if _, err := CopySparse(dst, filepath.Join(dir, "nope")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("CopySparse(missing source) = %v, want fs.ErrNotExist", err)
	}
	if _, err := os.Lstat(dst); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("destination created for a missing source: %v", err)
	}
}

func TestHashFile(t *testing.T) {
	for i, tt := range memoryLayouts {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "f")
			content := writeMemoryFile(t, path, uint64(100+i), tt.segs)
			fi, err := HashFile(path)
			if err != nil {
				t.Fatalf("HashFile: %v", err)
			}
			if want := sha256Hex(content); fi.SHA256 != want {
				t.Errorf("SHA256 = %s, want %s", fi.SHA256, want)
			}
			if fi.Size != int64(len(content)) {
				t.Errorf("Size = %d, want %d", fi.Size, len(content))
			}
			if want := blocksBytes(t, path); fi.Allocated != want {
				t.Errorf("Allocated = %d, want st_blocks*512 = %d", fi.Allocated, want)
			}
		})
	}
	t.Run("missing file is ErrMissing", func(t *testing.T) {
		_, err := HashFile(filepath.Join(t.TempDir(), "nope"))
		if !errors.Is(err, ErrMissing) {
			t.Fatalf("HashFile(missing) = %v, want ErrMissing", err)
		}
	})
}

func TestWriteFileSyncReplacesContent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	for _, content := range []string{"a longer first version", "short"} {
		if err := WriteFileSync(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Fatalf("content %q, want %q", got, content)
		}
	}
}

// committed builds a published snapshot of a 1 MiB guest in a fresh
// directory and returns its directory and manifest.
func committed(t *testing.T) (string, *Manifest) {
	t.Helper()
	root := t.TempDir()
	ram := filepath.Join(root, "ram")
	writeMemoryFile(t, ram, 7, []segment{{random, 3 * PageSize}, {hole, 100 * PageSize}, {oneByte, 2 * PageSize}, {hole, mib - 105*PageSize}})
	tmp := filepath.Join(root, ".tmp-snap-0123456789ab")
	final := filepath.Join(root, "snap-0123456789ab")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	state := make([]byte, 100<<10)
	for i := range state {
		state[i] = byte(i*7 + i>>8)
	}
	if err := os.WriteFile(filepath.Join(tmp, StateFile), state, 0o600); err != nil {
		t.Fatal(err)
	}
	mem, err := CopySparse(filepath.Join(tmp, MemoryFile), ram)
	if err != nil {
		t.Fatal(err)
	}
	m := testManifest()
	m.ID = "snap-0123456789ab"
	m.Guest.MemoryMiB = 1
	m.Files = map[string]FileInfo{MemoryFile: mem}
	if err := Commit(tmp, final, m); err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return final, m
}

func TestCommitPublishesCompleteSnapshot(t *testing.T) {
	final, m := committed(t)
	tmp := filepath.Join(filepath.Dir(final), ".tmp-snap-0123456789ab")
	if _, err := os.Lstat(tmp); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("temporary directory still exists after Commit: %v", err)
	}
	names := dirtest.Names(t, final)
	if want := []string{ManifestFile, MemoryFile, StateFile}; !equalStrings(names, want) {
		t.Errorf("snapshot holds %v, want %v", names, want)
	}

	got, err := ReadManifest(final)
	if err != nil {
		t.Fatalf("ReadManifest(published snapshot): %v", err)
	}
	if d := manifestDiff(m, got); d != "" {
		t.Errorf("published manifest differs from the committed one:\n%s", d)
	}
	state, err := os.ReadFile(filepath.Join(final, StateFile))
	if err != nil {
		t.Fatal(err)
	}
	if st := got.Files[StateFile]; st.Size != int64(len(state)) || st.SHA256 != sha256Hex(state) {
		t.Errorf("manifest vmstate entry %+v does not describe the file (%d bytes, %s)", st, len(state), sha256Hex(state))
	}

	cm, stamp, err := Check(final, nil)
	if err != nil {
		t.Fatalf("Check(published snapshot): %v", err)
	}
	if d := manifestDiff(m, cm); d != "" {
		t.Errorf("Check returned another manifest:\n%s", d)
	}
	want, err := StampOf(filepath.Join(final, MemoryFile))
	if err != nil {
		t.Fatal(err)
	}
	if stamp != want {
		t.Errorf("Check stamp %+v, want the memory file's %+v", stamp, want)
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCommitFailures(t *testing.T) {
	tests := []struct {
		name  string
		state []byte // nil: no vmstate file
		want  error
	}{
		{name: "missing device state", state: nil, want: ErrMissing},
		{name: "empty device state", state: []byte{}, want: ErrCorrupt},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			tmp, final := filepath.Join(root, ".tmp"), filepath.Join(root, "snap")
			if err := os.Mkdir(tmp, 0o700); err != nil {
				t.Fatal(err)
			}
			if tt.state != nil {
				if err := os.WriteFile(filepath.Join(tmp, StateFile), tt.state, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			m := testManifest()
			err := Commit(tmp, final, m)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Commit = %v, want %v", err, tt.want)
			}
			if _, err := os.Lstat(final); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("failed Commit published %s: %v", final, err)
			}
			if _, err := os.Lstat(tmp); err != nil {
				t.Errorf("failed Commit removed the temporary directory (the caller's job): %v", err)
			}
		})
	}
}

func TestCommitDoesNotReplaceExistingSnapshot(t *testing.T) {
	final, _ := committed(t)
	before, err := os.ReadFile(filepath.Join(final, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(filepath.Dir(final), ".tmp-second")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, StateFile), []byte("other state"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := testManifest()
	if err := Commit(tmp, final, m); err == nil {
		t.Fatal("Commit over an existing snapshot directory succeeded")
	}
	after, err := os.ReadFile(filepath.Join(final, ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("existing snapshot's manifest was replaced")
	}
}

// flipByte inverts one byte of path in place (a normal write: the file's
// inode stays, its mtime and ctime change).
func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// damageCase is one way a snapshot's files are damaged, and the error
// Check must then return.
type damageCase struct {
	name   string
	damage func(t *testing.T, dir string)
	want   error
}

// damageCases damage the device state, the memory and the manifest.
func damageCases() []damageCase {
	return []damageCase{
		{name: "truncated device state", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			p := filepath.Join(dir, StateFile)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, st.Size()-1); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "flipped byte in device state", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, StateFile), 5000)
		}},
		{name: "missing device state", want: ErrMissing, damage: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, StateFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "missing memory", want: ErrMissing, damage: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, MemoryFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "memory one page too long", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, MemoryFile), mib+PageSize); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "memory truncated", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, MemoryFile), mib/2); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "flipped byte in a memory page", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, MemoryFile), PageSize+17)
		}},
		{name: "byte written into a memory hole", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, MemoryFile), mib-1)
		}},
		{name: "memory replaced by a file of the same size", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			// Written beside it and renamed over it: a new inode.
			p, other := filepath.Join(dir, MemoryFile), filepath.Join(dir, "other")
			if err := os.WriteFile(other, make([]byte, mib), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(other, p); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "missing manifest", want: ErrMissing, damage: func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "edited manifest", want: ErrCorrupt, damage: func(t *testing.T, dir string) {
			p := filepath.Join(dir, ManifestFile)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			b = bytes.Replace(b, []byte(`"accel": "tcg"`), []byte(`"accel": "kvm"`), 1)
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
}

func TestCheckDetectsDamage(t *testing.T) {
	tests := damageCases()
	for _, tt := range tests {
		for _, withStamp := range []bool{false, true} {
			name := tt.name + "/no trusted stamp"
			if withStamp {
				name = tt.name + "/stale trusted stamp"
			}
			t.Run(name, func(t *testing.T) {
				dir, _ := committed(t)
				// The stamp recorded by a successful full verification.
				_, good, err := Check(dir, nil)
				if err != nil {
					t.Fatalf("Check before damage: %v", err)
				}
				var trusted *Stamp
				if withStamp {
					trusted = &good
				}
				tt.damage(t, dir)
				m, _, err := Check(dir, trusted)
				if !errors.Is(err, tt.want) {
					t.Fatalf("Check after damage = %v, want %v", err, tt.want)
				}
				if m != nil {
					t.Errorf("Check returned a manifest with error %v", err)
				}
			})
		}
	}
}

func TestCheckTrustedStampSkipsMemoryHash(t *testing.T) {
	dir, _ := committed(t)
	mem := filepath.Join(dir, MemoryFile)
	_, verified, err := Check(dir, nil)
	if err != nil {
		t.Fatal(err)
	}

	flipByte(t, mem, 2*PageSize)
	current, err := StampOf(mem)
	if err != nil {
		t.Fatal(err)
	}
	// A normal write changes the stamp, so the stamp recorded at the last
	// verification no longer vouches for the file. (If this fails, two
	// writes landed in the same timestamp tick and the stamp cannot tell
	// them apart: a "racily clean" file, see git's racy-git.txt.)
	if current == verified {
		t.Fatalf("stamp unchanged by an in-place write: %+v", current)
	}
	if _, _, err := Check(dir, &verified); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check with the pre-corruption stamp = %v, want ErrCorrupt", err)
	}
	if _, _, err := Check(dir, nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Check without a trusted stamp = %v, want ErrCorrupt", err)
	}
	// Given the corrupted file's own stamp as trusted, Check accepts it:
	// proof that a trusted stamp equal to the file's skips hashing memory.
	m, st, err := Check(dir, &current)
	if err != nil {
		t.Fatalf("Check with a trusted stamp equal to the current one = %v, want success without re-hashing memory", err)
	}
	if m == nil || st != current {
		t.Fatalf("Check = (%v, %+v), want the manifest and stamp %+v", m, st, current)
	}
}

func TestCheckTrustedStampStillChecksSizeAndState(t *testing.T) {
	t.Run("memory size", func(t *testing.T) {
		dir, _ := committed(t)
		mem := filepath.Join(dir, MemoryFile)
		if err := os.Truncate(mem, mib-PageSize); err != nil {
			t.Fatal(err)
		}
		current, err := StampOf(mem)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Check(dir, &current); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Check = %v, want ErrCorrupt for a wrong memory size even with a matching stamp", err)
		}
	})
	t.Run("device state content", func(t *testing.T) {
		dir, _ := committed(t)
		flipByte(t, filepath.Join(dir, StateFile), 1)
		current, err := StampOf(filepath.Join(dir, MemoryFile))
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := Check(dir, &current); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("Check = %v, want ErrCorrupt: vmstate is hashed whatever the memory stamp", err)
		}
	})
}

func TestStampOf(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("12345"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := StampOf(p)
	if err != nil {
		t.Fatal(err)
	}
	var sys syscall.Stat_t
	if err := syscall.Stat(p, &sys); err != nil {
		t.Fatal(err)
	}
	if st.Ino != sys.Ino || st.Size != 5 || st.Mtime != sys.Mtim.Nano() || st.Ctime != sys.Ctim.Nano() {
		t.Errorf("StampOf = %+v, stat says ino %d size 5 mtime %d ctime %d", st, sys.Ino, sys.Mtim.Nano(), sys.Ctim.Nano())
	}
	// Replacing the file (a new inode renamed over it) changes the stamp
	// even with an equal size.
	if err := os.WriteFile(filepath.Join(dir, "g"), []byte("67890"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(dir, "g"), p); err != nil {
		t.Fatal(err)
	}
	st2, err := StampOf(p)
	if err != nil {
		t.Fatal(err)
	}
	if st2 == st {
		t.Errorf("stamp of a replaced file equals the old one: %+v", st)
	}
	if _, err := StampOf(filepath.Join(dir, "nope")); !errors.Is(err, ErrMissing) {
		t.Errorf("StampOf(missing) = %v, want ErrMissing", err)
	}
}
