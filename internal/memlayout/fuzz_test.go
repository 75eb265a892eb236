package memlayout

import (
	"bytes"
	"reflect"
	"testing"
)

var fuzzFixtures = []struct {
	spec  string
	tail  int
	order []uint64
}{
	{"DDDDHHZDDDDDDDDDDDDDDDDDD", 0, []uint64{3, 9, 4, 20, 21, 0, 5}},
	{"HHHH", 0, nil},
	{"DZD", 5, []uint64{2, 1, 0}},
}

// fuzzManifest fuzzes decodeManifest of one artifact kind from the
// encodings of seeds and extra inputs: an accepted manifest must be
// canonical, round-trip unchanged, and pass check.
func fuzzManifest[T any, P manifest[T]](f *testing.F, seeds []P, extra []string, check func(*testing.T, P)) {
	for _, a := range seeds {
		b, err := a.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range extra {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := decodeManifest[T, P](b)
		if err != nil {
			return
		}
		b2, err := a.Encode()
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("accepted a non-canonical manifest:\n%s\nre-encodes as\n%s", b, b2)
		}
		a2, err := decodeManifest[T, P](b2)
		if err != nil {
			t.Fatalf("re-encoded manifest refused: %v", err)
		}
		if !reflect.DeepEqual(a, a2) {
			t.Fatalf("round trip changed the manifest:\n%+v\n%+v", a, a2)
		}
		check(t, a)
	})
}

func FuzzReadFaaSnapManifest(f *testing.F) {
	var seeds []*FaaSnapArtifact
	for i, c := range fuzzFixtures {
		a, _, _ := buildFaaSnap(f, f.TempDir(), c.spec, c.tail, c.order, FaaSnapOptions{GroupSize: 1 + i, MergeGap: 2})
		seeds = append(seeds, a)
	}
	extra := []string{`{"magic":"thaw-faasnap","format_version":2}`, `{}`}
	fuzzManifest(f, seeds, extra, func(t *testing.T, a *FaaSnapArtifact) {
		// Every accepted manifest of a page-aligned memory yields a layout
		// the shim accepts.
		if a.Memory.Size%int64(PageSize) == 0 {
			l, err := a.ShimLayout()
			if err != nil {
				t.Fatalf("accepted manifest has no valid layout: %v", err)
			}
			if _, err := DecodeShimLayout(l); err != nil {
				t.Fatalf("layout refused: %v", err)
			}
		}
	})
}

func FuzzReadREAPManifest(f *testing.F) {
	var seeds []*REAPArtifact
	for _, c := range fuzzFixtures {
		a, _, _ := buildREAP(f, f.TempDir(), c.spec, c.tail, c.order)
		seeds = append(seeds, a)
	}
	extra := []string{`{"magic":"thaw-reap","format_version":1,"pages":[[1,2],[1]]}`}
	fuzzManifest(f, seeds, extra, func(t *testing.T, a *REAPArtifact) {
		if n := CountPages(a.Pages); n < 1<<16 && uint64(len(a.PageOrder())) != n {
			t.Fatalf("page order has %d pages, runs %d", len(a.PageOrder()), n)
		}
	})
}

func FuzzDecodeShimLayout(f *testing.F) {
	for _, tab := range []*ShimTable{
		{MemSize: 16 * PageSize},
		{MemSize: 16 * PageSize, Entries: []ShimEntry{
			{0, 16 * PageSize, 0, ShimAnonymous},
			{PageSize, 2 * PageSize, PageSize, ShimMemoryFile},
			{8 * PageSize, PageSize, 0, ShimLoadingSet},
		}},
	} {
		b, err := tab.Encode()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("THAWLAY1"))
	mem := bytes.Repeat([]byte{1, 2, 3}, 3*int(PageSize)) // 9 pages
	ls := bytes.Repeat([]byte{7}, 2*int(PageSize)+5)
	f.Fuzz(func(t *testing.T, b []byte) {
		tab, err := DecodeShimLayout(b)
		if err != nil {
			if _, err := Resolve(b, mem, ls); err == nil {
				t.Fatal("Resolve accepted a refused layout")
			}
			return
		}
		b2, err := tab.Encode()
		if err != nil {
			t.Fatalf("accepted layout does not encode: %v", err)
		}
		if !bytes.Equal(b, b2) {
			t.Fatalf("re-encoding changed the layout")
		}
		tab2, err := DecodeShimLayout(b2)
		if err != nil || !reflect.DeepEqual(tab, tab2) {
			t.Fatalf("round trip: %v", err)
		}
		if tab.MemSize <= 1<<20 {
			out, err := Resolve(b, mem, ls)
			if err == nil && uint64(len(out)) != tab.MemSize {
				t.Fatalf("resolved %d bytes of %d", len(out), tab.MemSize)
			}
		}
	})
}
