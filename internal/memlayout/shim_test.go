package memlayout

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

func TestShimLayoutEncoding(t *testing.T) {
	a := &FaaSnapArtifact{
		ArtifactHeader: ArtifactHeader{Memory: FileRef{Size: 16 * PageSizeInt}},
		NonzeroRegions: []PageRun{{1, 2}, {5, 3}},
		LoadingRegions: []LSRegion{{6, 1, 0, 0}, {1, 1, 1, PageSize}},
	}
	got, err := a.ShimLayout()
	if err != nil {
		t.Fatal(err)
	}
	le := func(v ...uint64) string { // 8-byte words
		var b []byte
		for _, x := range v {
			b = binary.LittleEndian.AppendUint64(b, x)
		}
		return hex.EncodeToString(b)
	}
	want := hex.EncodeToString([]byte("THAWLAY1")) + "01000000" + "04000000" + le(65536, 0) +
		le(4096, 8192, 4096) + "01000000" + "00000000" +
		le(20480, 12288, 20480) + "01000000" + "00000000" +
		le(24576, 4096, 0) + "02000000" + "00000000" +
		le(4096, 4096, 4096) + "02000000" + "00000000"
	if hex.EncodeToString(got) != want {
		t.Fatalf("layout\n%x\nwant\n%s", got, want)
	}
	tab, err := DecodeShimLayout(got)
	if err != nil {
		t.Fatal(err)
	}
	wantTab := &ShimTable{MemSize: 65536, Entries: []ShimEntry{
		{4096, 8192, 4096, ShimMemoryFile}, {20480, 12288, 20480, ShimMemoryFile},
		{24576, 4096, 0, ShimLoadingSet}, {4096, 4096, 4096, ShimLoadingSet},
	}}
	if !reflect.DeepEqual(tab, wantTab) {
		t.Fatalf("decoded %+v", tab)
	}
	// Without the loading-set file: the memory-file entries alone.
	mf, err := a.MemoryFileLayout()
	if err != nil {
		t.Fatal(err)
	}
	if tab, err := DecodeShimLayout(mf); err != nil || !reflect.DeepEqual(tab.Entries, wantTab.Entries[:2]) {
		t.Fatalf("memory-file layout %+v, %v", tab, err)
	}
	// No regions: a header only, the whole memory anonymous.
	empty, err := (&FaaSnapArtifact{ArtifactHeader: ArtifactHeader{Memory: FileRef{Size: 8192}}}).ShimLayout()
	if err != nil || len(empty) != ShimHeaderSize {
		t.Fatalf("empty layout %x, %v", empty, err)
	}
	if m, err := Resolve(empty, nil, nil); err != nil || !bytes.Equal(m, make([]byte, 8192)) {
		t.Fatalf("empty layout resolves to %v, %v", len(m), err)
	}
}

func TestShimLayoutPartialMemory(t *testing.T) {
	a, _, _ := buildFaaSnap(t, t.TempDir(), "DDD", 100, []uint64{2}, FaaSnapOptions{})
	if _, err := a.ShimLayout(); err == nil {
		t.Fatal("layout for a memory with a partial page")
	}
}

func TestDecodeShimLayoutRejects(t *testing.T) {
	valid := func() *ShimTable {
		return &ShimTable{MemSize: 16 * PageSize, Entries: []ShimEntry{
			{0, 16 * PageSize, 0, ShimAnonymous},
			{PageSize, 2 * PageSize, PageSize, ShimMemoryFile},
			{8 * PageSize, PageSize, 0, ShimLoadingSet},
		}}
	}
	good, err := valid().Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeShimLayout(good); err != nil {
		t.Fatal(err)
	}
	put32 := func(off int, v uint32) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint32(b[off:], v); return b }
	}
	put64 := func(off int, v uint64) func([]byte) []byte {
		return func(b []byte) []byte { binary.LittleEndian.PutUint64(b[off:], v); return b }
	}
	e := func(i, field int) int { return ShimHeaderSize + i*ShimEntrySize + field }
	for _, tc := range []struct {
		name string
		mut  func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"short header", func(b []byte) []byte { return b[:31] }},
		{"magic", func(b []byte) []byte { b[0] = 't'; return b }},
		{"version 2", put32(8, 2)},
		{"version 0", put32(8, 0)},
		{"count too big", put32(12, 4)},
		{"count too small", put32(12, 2)},
		{"count huge", put32(12, math.MaxUint32)},
		{"trailing byte", func(b []byte) []byte { return append(b, 0) }},
		{"entry cut", func(b []byte) []byte { return b[:len(b)-1] }},
		{"mem size 0", put64(16, 0)},
		{"mem size unaligned", put64(16, 16*PageSize+1)},
		{"mem size smaller than an entry", put64(16, 8*PageSize)},
		{"header reserved", put64(24, 1)},
		{"entry reserved", put32(e(1, 28), 1)},
		{"guest_off unaligned", put64(e(1, 0), PageSize+1)},
		{"length unaligned", put64(e(1, 8), 100)},
		{"length 0", put64(e(1, 8), 0)},
		{"file_off unaligned", put64(e(1, 16), 7)},
		{"beyond memory", put64(e(2, 0), 16*PageSize)},
		{"ends beyond memory", put64(e(2, 8), 9*PageSize)},
		{"guest_off+length overflows", put64(e(2, 0), math.MaxUint64-PageSize+1)},
		{"file range overflows off_t", put64(e(1, 16), math.MaxInt64-PageSize+1)},
		{"kind 4", put32(e(1, 24), 4)},
		{"anonymous with file_off", put64(e(0, 16), PageSize)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.mut(bytes.Clone(good))
			if _, err := DecodeShimLayout(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v", err)
			}
			if _, err := Resolve(b, nil, nil); err == nil {
				t.Fatal("Resolve accepted it")
			}
		})
	}
	for _, tc := range []struct {
		name string
		mut  func(*ShimTable)
	}{
		{"encode mem size 0", func(t *ShimTable) { t.MemSize = 0 }},
		{"encode kind 7", func(t *ShimTable) { t.Entries[0].Kind = 7 }},
	} {
		tab := valid()
		tc.mut(tab)
		if _, err := tab.Encode(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestResolveSemantics(t *testing.T) {
	page := func(c byte) []byte { return bytes.Repeat([]byte{c}, ps) }
	mem := bytes.Join([][]byte{page('a'), page('b'), page('c')}, nil)
	ls := bytes.Join([][]byte{page('x'), page('y')}, nil)
	enc := func(size uint64, es ...ShimEntry) []byte {
		b, err := (&ShimTable{MemSize: size, Entries: es}).Encode()
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	P := PageSize
	for _, tc := range []struct {
		name   string
		layout []byte
		mem    []byte
		want   []byte // nil: error
	}{
		{"anonymous base", enc(2 * P), mem, bytes.Repeat([]byte{0}, 2*ps)},
		{"later entries on top", enc(3*P,
			ShimEntry{0, 3 * P, 0, ShimMemoryFile},
			ShimEntry{P, P, P, ShimLoadingSet},
			ShimEntry{2 * P, P, 0, ShimAnonymous}),
			mem, bytes.Join([][]byte{page('a'), page('y'), page(0)}, nil)},
		{"file offset differs from guest offset", enc(2*P, ShimEntry{0, 2 * P, P, ShimMemoryFile}),
			mem, bytes.Join([][]byte{page('b'), page('c')}, nil)},
		{"partial last file page reads zeros after EOF", enc(P, ShimEntry{0, P, 0, ShimMemoryFile}),
			[]byte("hi"), append([]byte("hi"), make([]byte, ps-2)...)},
		{"page past EOF is SIGBUS", enc(2*P, ShimEntry{0, 2 * P, 2 * P, ShimMemoryFile}), mem, nil},
		{"loading set past EOF is SIGBUS", enc(3*P, ShimEntry{0, 3 * P, 0, ShimLoadingSet}), mem, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Resolve(tc.layout, tc.mem, ls)
			if tc.want == nil {
				if err == nil {
					t.Fatal("no error")
				}
				return
			}
			if err != nil || !bytes.Equal(got, tc.want) {
				t.Fatalf("Resolve = %q..., %v", got[:min(len(got), 8)], err)
			}
		})
	}
}

// TestResolveConformance is the planner half of the shim conformance
// suite: for random synthetic memory files and working sets, the layout
// WriteFaaSnap plans yields, applied as the shim applies it, exactly the
// memory file's content.
func TestResolveConformance(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for i := range 50 {
		dir := t.TempDir()
		pages := 1 + rng.IntN(1000)
		spec := randomSpec(rng, pages)
		var order []uint64
		for range rng.IntN(pages + 1) {
			order = append(order, uint64(rng.IntN(pages)))
		}
		opts := FaaSnapOptions{GroupSize: rng.IntN(64) - 4, MergeGap: rng.IntN(80) - 10}
		a, content, mem := buildFaaSnap(t, dir, spec, 0, order, opts)
		layout, err := a.ShimLayout()
		if err != nil {
			t.Fatal(err)
		}
		memFile := mustRead(t, mem)
		lsFile := mustRead(t, a.LoadingSetPath())
		got, err := Resolve(layout, memFile, lsFile)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, content) {
			t.Fatalf("case %d (%s, order %v, %+v): layout does not reproduce memory", i, strings.TrimSpace(spec[:min(len(spec), 60)]), order[:min(len(order), 20)], opts)
		}
		// The loading-set entries are really used: damage the file and the
		// result changes.
		if len(lsFile) > 0 {
			bad := bytes.Clone(lsFile)
			bad[rng.IntN(len(bad))] ^= 0x40
			if got, _ := Resolve(layout, memFile, bad); bytes.Equal(got, content) {
				t.Fatalf("case %d: loading-set file not used", i)
			}
		}
		// And the zero regions are anonymous: the memory file's zero pages
		// can hold anything without changing the result.
		dirty := bytes.Clone(memFile)
		for p := 0; p < pages; p++ {
			if FindRegion(a.NonzeroRegions, uint64(p)) < 0 {
				dirty[p*ps] = 0xee
			}
		}
		if got, _ := Resolve(layout, dirty, lsFile); !bytes.Equal(got, content) {
			t.Fatalf("case %d: a zero page is mapped from the memory file", i)
		}
	}
}
